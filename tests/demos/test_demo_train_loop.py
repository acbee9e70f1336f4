"""The shapes demo's one optimisation loop (fast).

Cached warm starts are keyed by their settings, not by the loop's code, so the loop must keep
training exactly what the pre-refactor loops trained. The reference below is that loop, written
out once more on purpose: any reordering in :func:`train_steps` (schedule before optimiser, no
clipping, a different warm-up) changes the weights and fails here, instead of silently making
every cached warm start stale.
"""

from __future__ import annotations

import logging
import math
import random

import pytest
import torch

from vlrl.demos.shapes.tiny_models.train_loop import LOG_EVERY, train_steps, warmup_cosine

STEPS, LR = LOG_EVERY + 30, 3e-2


def _problem(seed: int = 0):
    """A tiny two-layer net and a loss that draws its batch from a Python RNG, as the demo's loops do."""
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    x, y = torch.randn(200, 6), torch.randint(0, 3, (200,))
    rng = random.Random(f"batches/{seed}")

    def loss_fn(step: int):
        idx = [rng.randrange(len(x)) for _ in range(8)]
        # a large scale early on, so gradient clipping at norm 1 actually bites
        return torch.nn.functional.cross_entropy(net(x[idx]) * (20.0 if step < 10 else 1.0), y[idx])

    return net, loss_fn


def _reference(net, loss_fn, steps: int, lr: float, schedule_first: bool = False):
    """The step every pre-refactor warm-start loop took, line for line (``schedule_first``: the
    same loop with the schedule stepped before the optimiser, a wrong order the check must catch)."""

    def lr_lambda(step: int, warmup: int = 30) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))

    params = list(net.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    losses, at_log = [], []
    for step in range(steps):
        loss = loss_fn(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        for update in ((sched.step, opt.step) if schedule_first else (opt.step, sched.step)):
            update()
        losses.append(loss.item())
        if (step + 1) % 100 == 0:
            at_log.append([p.detach().clone() for p in params])
    return losses, at_log


def test_train_steps_trains_bit_for_bit_what_the_hand_written_loops_trained(caplog):
    ref_net, ref_loss = _problem()
    ref_losses, ref_at_log = _reference(ref_net, ref_loss, STEPS, LR)

    net, loss_fn = _problem()
    seen = []

    def report() -> str:
        seen.append([p.detach().clone() for p in net.parameters()])
        return "probe 1.000"

    with caplog.at_level(logging.INFO, logger="vlrl.demos.shapes.tiny_models.train_loop"):
        losses = train_steps(net.parameters(), loss_fn, steps=STEPS, lr=LR, name="net-s0", report=report)

    assert losses == ref_losses
    for p, q in zip(net.parameters(), ref_net.parameters(), strict=True):
        assert torch.equal(p, q)
    assert losses[-1] < losses[0]  # it did train
    # the report runs once per log line, after that step's update (an evaluation sees the new model)
    assert len(seen) == len(ref_at_log) == STEPS // LOG_EVERY
    for got, want in zip(seen, ref_at_log, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    (line,) = [r.getMessage() for r in caplog.records]
    mean = sum(losses[:LOG_EVERY]) / LOG_EVERY
    assert line.startswith(f"net-s0 step {LOG_EVERY}/{STEPS} loss {mean:.3f} probe 1.000 (")


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")
def test_a_different_step_order_is_caught():
    """The comparison above is sensitive: stepping the schedule before the optimiser changes the weights."""
    net, loss_fn = _problem()
    train_steps(net.parameters(), loss_fn, steps=40, lr=LR, name="net-s0")

    other, other_loss = _problem()
    _reference(other, other_loss, 40, LR, schedule_first=True)
    assert not all(torch.equal(p, q) for p, q in zip(net.parameters(), other.parameters(), strict=True))


@pytest.mark.parametrize("total", [31, 110, 1000])
def test_warmup_cosine_warms_up_linearly_then_decays_to_zero(total):
    f = warmup_cosine(total)
    warm = [f(s) for s in range(30)]
    assert warm == sorted(warm) and warm[0] > 0 and warm[-1] == 1.0
    assert all(b - a == pytest.approx(1 / 30) for a, b in zip(warm, warm[1:], strict=False))
    decay = [f(s) for s in range(30, total + 1)]
    assert decay[0] == 1.0 and decay == sorted(decay, reverse=True)
    assert f(total) == pytest.approx(0.0, abs=1e-12)
