"""The one optimisation loop behind the shapes demo's hand-written warm starts.

The answerers, the rubric judge and the Likert judge each build their batches and losses their own
way (see their modules for why none of them is an SFT recipe), but they all take the same step:
AdamW without weight decay, a short linear warm-up then a cosine decay to zero, gradients clipped
to norm 1, and a log line every :data:`LOG_EVERY` steps. That step lives here, once, so those warm
starts cannot drift apart. (The captioner is trained by the project's SFT recipe with the same
schedule; see :func:`vlrl.demos.shapes.tiny_models.captioner.captioner_recipe`.)

Cached warm starts are keyed by their settings, not by this code, so the loop must stay exactly
what it was: the order of operations below (forward through ``loss_fn``, then zero the gradients,
backward, clip, step the optimiser, step the schedule, record the loss, log) is part of every
cached model's identity. Change it and every cached warm start, and every number measured on
one, silently stops matching what a fresh run trains.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

LOG_EVERY = 100
WARMUP_STEPS = 30


def warmup_cosine(total: int, warmup: int = WARMUP_STEPS) -> Callable[[int], float]:
    """Learning-rate factor for ``LambdaLR``: linear warm-up over ``warmup`` steps, then cosine to 0."""

    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))

    return f


def train_steps(params: Iterable[torch.nn.Parameter], loss_fn: Callable[[int], torch.Tensor], *, steps: int,
                lr: float, name: str, report: Callable[[], str] | None = None) -> list[float]:
    """Run ``steps`` optimiser steps on ``loss_fn(step)`` and return every step's loss.

    ``loss_fn`` draws its batch and runs the forward pass (the caller's own data code, in the
    caller's own random order); this function owns the rest. Every :data:`LOG_EVERY` steps it logs
    ``"<name> step i/steps loss <mean of the last LOG_EVERY> <report()> (<seconds>s)"``;
    ``report`` (e.g. a held-out accuracy) is called only then, after the step, as the caller's
    evaluation needs the updated model. The caller puts the model in training mode first.
    """
    import torch

    params = list(params)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine(steps))
    t0, losses = time.time(), []
    for step in range(steps):
        loss = loss_fn(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if (step + 1) % LOG_EVERY == 0:
            extra = f" {report()}" if report is not None else ""
            logger.info("%s step %d/%d loss %.3f%s (%.0fs)", name, step + 1, steps,
                        sum(losses[-LOG_EVERY:]) / LOG_EVERY, extra, time.time() - t0)
    return losses


def fresh_tiny_lm(tok_dir: Path, out: Path, seed: int, *, chat_template: str, hidden: int, layers: int, init: float,
                  name: str):
    """A new tiny Qwen2 LM written to ``out`` (the tokenizer of ``tok_dir`` with ``chat_template``),
    loaded back for training, and the ``hf:`` backend around it: ``(model, tokenizer, backend)``.

    The text-only tiny models (the QA answerers, the rubric judge) label their training data with
    that backend's own prompt rendering and choice tokens, so training and use cannot disagree. The
    seeding order (the init by ``make_tiny``, then ``torch.manual_seed(seed)``) is part of every
    cached model's identity, like the step in :func:`train_steps`.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vlrl.core.backends.hf import HFBackend
    from vlrl.core.tiny import make_tiny

    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    tok.chat_template = chat_template
    make_tiny("qwen2", out, seed=seed, tokenizer=tok, hidden_size=hidden, num_hidden_layers=layers,
              num_attention_heads=4, num_key_value_heads=2, initializer_range=init)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(str(out))
    tok = AutoTokenizer.from_pretrained(str(out))
    return model, tok, HFBackend(model=model, processor=tok, device="cpu", name=name)
