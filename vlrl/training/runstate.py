"""What an ``output_dir`` already holds, and what a rerun may do with it.

Three questions are answered before any model loads, each with a one-line message:

* **Is it the same run?** (:func:`check_identity`) ``recipe.resolved.json`` is written when a run
  *starts*; a rerun whose resolved recipe differs (other than in keys that may change between
  reruns, :data:`IDENTITY_IGNORED`) is refused with the differences shown ``old → new``, unless
  ``--force``. Resuming another recipe's checkpoint would silently mix two runs and overwrite the
  first one's metrics.
* **Is it finished?** (:func:`finished_metrics`) ``metrics.json`` carries ``finished: true`` and the
  ``max_steps`` it ran to. Rerunning a finished run reports it and trains nothing; raising
  ``max_steps`` continues from the final checkpoint (always written, :class:`SaveAtEnd`) with the
  learning-rate schedule re-planned for the new length (:func:`replan_lr`), because the restored
  optimizer otherwise holds the old schedule's last value (0 for a decaying schedule) for one step.
* **Is training producing signal?** (:class:`NoneRewardGuard`) after K consecutive steps in which
  a reward had no signal (every score ``None``, a backend failure or a guard's floor) the run stops
  with :class:`RunFailed` naming the reward and its backend, instead of "succeeding" on zero
  advantages.

It also holds what the trainers share, so GRPO, PTST stages and SFT prepare and resume the same
way: :func:`prepare` and :func:`open_run` (everything before the policy loads; PTST's
``open_ptst`` builds on :func:`prepare`), :func:`latest_checkpoint`, :func:`train_or_finish`, the callbacks every trainer gets
(:func:`trainer_callbacks`) and :func:`is_main_process` (only rank 0 writes run-level files).
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from vlrl.core.identity import flatten, identity_changes, read_identity, without_keys
from vlrl.training.recipe import Recipe, RecipeError, resolve_tiny

logger = logging.getLogger(__name__)

RESOLVED = "recipe.resolved.json"
METRICS = "metrics.json"
# Keys that may differ between an interrupted run and its rerun without making it another run. Nothing
# the data stream depends on is here: the sampler shuffles by the dataset's length, so another
# data.max_samples reorders every epoch and a resumed PTST stage would see rows it already trained on.
IDENTITY_IGNORED = (
    "trainer.output_dir", "trainer.max_steps", "trainer.num_train_epochs", "trainer.logging_steps",
    "trainer.save_steps", "trainer.save_total_limit", "trainer.report_to", "trainer.log_completions",
    "trainer.num_completions_to_print", "trainer.run_name", "trainer.dataloader_num_workers",
    "callbacks", "run.", "stages.",
)


class RunFailed(RuntimeError):
    """Training ran but cannot produce a useful model (e.g. no reward signal); exit non-zero."""


def identity_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old → new`` for every identity-relevant difference between two resolved recipes.

    A resolved recipe is a run identity in the sense of :mod:`vlrl.core.identity`, flattened to
    dotted keys; every key counts (a key set on one side only is a real difference) except those in
    :data:`IDENTITY_IGNORED` and the stage plan and run block (which a rerun may change)."""

    def relevant(doc: dict[str, Any]) -> dict[str, Any]:
        # both sides are JSON round trips of a recipe, so values compare as plain JSON
        flat = without_keys(flatten(doc), IDENTITY_IGNORED)
        return {k: v for k, v in flat.items() if not k.startswith(("stages", "run"))}

    return identity_changes(relevant(old), relevant(new), shared_only=False)


def check_identity(recipe, out: Path, *, force: bool = False) -> None:
    """Refuse (unless ``force``) to continue in ``out`` when it holds a run of a different recipe."""
    old = read_identity(Path(out) / RESOLVED)  # None: no run there yet, or unreadable (logged)
    if old is None:
        return
    diffs = identity_diff(old, json.loads(json.dumps(recipe.to_dict(), default=str)))
    if not diffs:
        return
    shown = "\n    ".join(diffs[:20]) + (f"\n    … and {len(diffs) - 20} more" if len(diffs) > 20 else "")
    if force:
        logger.warning("--force: continuing in %s although its recipe differs:\n    %s", out, shown)
        return
    raise RecipeError(
        f"{out} holds a different run (its {RESOLVED} differs: old → new):\n    {shown}\n"
        "use a new output_dir, restore those values, or pass --force to continue this folder with the new recipe"
    )


def write_identity(recipe, out: Path) -> None:
    from vlrl.core.pipeline import atomic_write_json

    if int(os.environ.get("RANK", "0") or 0) == 0:  # rank 0 writes run-level files
        Path(out).mkdir(parents=True, exist_ok=True)
        atomic_write_json(Path(out) / RESOLVED, json.loads(json.dumps(recipe.to_dict(), default=str)))


DATA_STREAM = "data_stream.json"
_MEDIA_COLUMNS = ("image", "images", "video")


def data_stream(dataset) -> dict[str, Any]:
    """What the shuffled data stream is drawn from: the training rows, in order, as a row count and a digest.

    The recipe names the source, but the sampler shuffles the rows the source *gives*: a data file
    rewritten in place, or a record whose image became readable (or unreadable) since the run began,
    changes the dataset's length or order under an unchanged recipe, and a resume would reshuffle it.
    Media count by file name only, so a dataset moved to another folder is the same stream."""
    import hashlib

    table = dataset.data  # the raw columns, before the dataset's decoding transform
    digest = hashlib.sha256()
    for name in sorted(table.column_names):
        values = table.column(name).to_pylist()
        if name in _MEDIA_COLUMNS:
            values = [[Path(str(x)).name for x in v] if isinstance(v, list) else Path(str(v)).name for v in values]
        digest.update(json.dumps([name, values], ensure_ascii=False, default=str).encode())
    return {"rows": len(dataset), "sha256": digest.hexdigest()}


def check_data_stream(dataset, out: Path, *, force: bool = False, resume: bool = True, world: int | None = None) -> None:
    """Refuse (unless ``force``) to continue in ``out`` a run whose data stream differs from the one it
    started with (:func:`data_stream`); record the stream at the first start (and at a start that does
    not resume).

    ``world``: the number of training processes, for a trainer whose resume skips the batches already
    trained *per process* (GRPO: another world size would skip a different share of the shuffled
    stream, replaying or dropping rows, and train with another global batch). PTST passes none: it
    re-plans the per-device batches for the same prompts per step."""
    from vlrl.core.pipeline import atomic_write_json

    now = data_stream(dataset)
    if world is not None:
        now["world_size"] = int(world)
    path = Path(out) / DATA_STREAM
    try:
        old = json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        old = None
    if isinstance(old, dict) and "world_size" in now and "world_size" not in old:
        old = {**old, "world_size": now["world_size"]}  # recorded before the world size was: not a difference
    if resume and isinstance(old, dict) and old != now:
        if {k: v for k, v in old.items() if k != "world_size"} != {k: v for k, v in now.items() if k != "world_size"}:
            shown = (f"data.source gives {old.get('rows')} rows (sha256 {str(old.get('sha256'))[:12]}) → {now['rows']} "
                     f"rows (sha256 {now['sha256'][:12]})")
        else:
            shown = f"training processes: {old.get('world_size')} → {now.get('world_size')}"
        if not force:
            raise RecipeError(
                f"{out} holds a run trained on another data stream ({shown}); the resume would repeat or skip rows "
                "of its shuffled stream: use a new output_dir, restore the data or the number of processes, or pass "
                "--force to continue this folder as it is now"
            )
        logger.warning("--force: continuing in %s although its data stream differs: %s", out, shown)
    if old != now and is_main_process():
        Path(out).mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, now)


def checkpoint_step(ckpt: Path | None) -> int | None:
    if ckpt is None:
        return None
    try:
        return int(json.loads((Path(ckpt) / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def finished_metrics(out: Path, max_steps: Any, latest_ckpt: Path | None) -> dict[str, Any] | None:
    """The saved metrics when ``out`` holds a finished run that ``max_steps`` does not extend.

    Raises :class:`RecipeError` when ``max_steps`` extends a finished run whose final state was not
    checkpointed (runs from before the final checkpoint was always written): resuming the older
    checkpoint would train the last steps twice.
    """
    path = Path(out) / METRICS
    if not path.is_file():
        return None
    try:
        m = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(m, dict) or not m.get("finished"):
        return None
    done = int(m.get("global_step") or 0)
    if not isinstance(max_steps, int) or max_steps <= done:
        return m
    step = checkpoint_step(latest_ckpt)
    if step != done:
        raise RecipeError(
            f"{out} finished at step {done}, but its newest checkpoint is step {step}; raising max_steps to "
            f"{max_steps} would retrain steps after {step}. Continue from its weights in a new folder instead: "
            f"model.path={out} output_dir=NEW_DIR max_steps={max_steps - done}"
        )
    logger.info("%s finished at step %d; continuing to max_steps=%d with the schedule re-planned", out, done, max_steps)
    return None


class SaveAtEnd(TrainerCallback):
    """Always checkpoint the final step, so a finished run can be extended exactly where it ended."""

    def on_step_end(self, args, state, control, **kw):
        if state.max_steps and state.global_step >= state.max_steps:
            control.should_save = True
        return control


class ReplanLR(TrainerCallback):
    """On a resumed run, re-plan the learning rate for the new schedule (:func:`replan_lr`).

    ``on_train_begin`` comes after the Trainer restored the optimizer and scheduler from the
    checkpoint (and its step, so ``global_step > 0`` means resumed), and it is handed both.
    """

    def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kw):
        if state.global_step > 0:
            replan_lr(lr_scheduler, optimizer)
        return control


def replan_lr(lr_scheduler: Any, optimizer: Any) -> None:
    """Set the optimizer's learning rates from the *current* schedule at the restored step.

    ``Trainer`` builds the scheduler for the new ``max_steps`` and then loads the checkpoint's
    scheduler state (its step counter) and optimizer state (whose learning rate is the value the old
    schedule set last). The first step after a resume therefore runs at the old schedule's rate — 0
    at the end of a linear or cosine decay. Recomputing from the lambdas fixes that for every
    ``LambdaLR`` schedule transformers builds; other schedulers are left as restored.
    """
    sch = getattr(lr_scheduler, "scheduler", lr_scheduler)
    lambdas, bases = getattr(sch, "lr_lambdas", None), getattr(sch, "base_lrs", None)
    if not lambdas or not bases or optimizer is None:
        return
    step = int(getattr(sch, "last_epoch", 0))
    groups = optimizer.param_groups
    for group, base, lam in zip(groups, bases, lambdas, strict=False):
        group["lr"] = base * lam(step)
    sch._last_lr = [g["lr"] for g in groups]
    if step and all(g["lr"] == 0 for g in groups):
        logger.warning("the learning-rate schedule is 0 at the restored step %d; raise max_steps further", step)


class NoneRewardGuard:
    """The reward-health rule: a reward with no signal for K steps in a row stops the run.

    A step counts when every reward is ``None`` (NaN in TRL's tensor), or against one
    :class:`~vlrl.rewards.base.Reward` when every one of its scores carries no evidence
    (:func:`~vlrl.rewards.base.no_signal`) and some of them are failures: a backend failure
    standing in as ``None`` or a number, a guard's floor put where the answerer gave nothing, a
    veto's floor. (A reward that is merely not applicable to a whole step, all plain ``None``
    beside a reward that scores, is no failure: small steps of a mixed dataset do that.) Looking at the values alone
    is not enough: a guard that turns each ``None`` of a dead answerer into ``-1.0`` makes a run that
    logs reward -1.0 with std 0 at every step, saves checkpoints and "succeeds". Each function keeps
    its own streak, so a dead answerer stops the run even beside a format reward that still works;
    the stop names the function and its backend.
    """

    def __init__(self, limit: int) -> None:
        self.limit = int(limit)
        self.streak = 0
        self.streaks: dict[int, int] = {}

    def observe(self, rewards_per_func, funcs: Sequence[Any] = (), gather: Any = None) -> None:
        """``rewards_per_func``: TRL's gathered (completions × functions) tensor, None as NaN;
        ``funcs``: the reward functions (their ``health`` after this step's call); ``gather``: sums a
        tensor over processes, so every rank reaches the same verdict (identity when alone)."""
        import torch

        if self.limit <= 0:
            return
        n_funcs = rewards_per_func.shape[1] if rewards_per_func.dim() == 2 else 1
        nan = torch.isnan(rewards_per_func.reshape(rewards_per_func.shape[0], n_funcs))
        local = torch.zeros(n_funcs, 3, device=rewards_per_func.device)
        for j, fn in enumerate(list(funcs)[:n_funcs]):
            h = getattr(fn, "health", None)
            if h is not None:
                local[j] = torch.tensor([float(h.dead), float(h.failed), float(h.total)])
        counts = gather(local) if gather is not None else local
        counts = counts.reshape(-1, n_funcs, 3).sum(0)
        if bool(nan.all()):
            self.streak += 1
            logger.warning("every reward was None in this step (%d in a row of %d allowed)", self.streak, self.limit)
            if self.streak >= self.limit:
                raise RunFailed(
                    f"every reward was None for {self.streak} consecutive steps: the reward cannot score anything "
                    f"({_backends(funcs)}: a dead answerer/judge backend, or a dataset without the columns it needs); "
                    "check the reward's backend with `vlrl train check`, fix it and rerun "
                    "(run.max_none_reward_steps=0 turns this stop off)"
                )
        else:
            self.streak = 0
        for j in range(n_funcs):
            dead, failed, total = (float(x) for x in counts[j])
            if total > 0 and dead >= total and failed > 0:
                self.streaks[j] = self.streaks.get(j, 0) + 1
            else:
                self.streaks[j] = 0
                continue
            fn = list(funcs)[j] if j < len(funcs) else None
            name = getattr(fn, "name", None) or getattr(fn, "__name__", f"reward {j}")
            logger.warning("reward %s had no signal in this step (%d in a row of %d allowed)", name, self.streaks[j], self.limit)
            if self.streaks[j] >= self.limit:
                raise RunFailed(
                    f"reward {name} had no signal for {self.streaks[j]} consecutive steps (every score None, a "
                    f"backend failure or a guard's floor): its backend {_backends([fn])} is not answering; check it "
                    "with `vlrl train check`, fix it and rerun (run.max_none_reward_steps=0 turns this stop off)"
                )


def _backends(funcs: Sequence[Any]) -> str:
    """The backends the reward functions talk to, as specs (redacted), for the one-line stop message."""
    from vlrl.core.redact import redact

    names = []
    for fn in funcs:
        for attr in ("answerer", "judge", "judges"):
            try:
                value = getattr(fn, attr, None)
            except Exception:  # noqa: BLE001 - a reward's lazy property must not hide the stop
                value = None
            for v in value if isinstance(value, (list, tuple)) else [value]:
                if v is None:
                    continue
                names.append(v if isinstance(v, str) else f"{getattr(v, 'kind', '?')}:{getattr(v, 'model', v)}")
    return redact(", ".join(dict.fromkeys(names))) if names else "unknown"


def reward_share(history: list[dict[str, Any]]) -> float | None:
    """Reward time as a share of step time over a run's log history."""
    r = sum(h["timing/reward_s"] for h in history if isinstance(h.get("timing/reward_s"), (int, float)))
    s = sum(h["timing/step_s"] for h in history if isinstance(h.get("timing/step_s"), (int, float)))
    return r / s if s > 0 and math.isfinite(r / s) else None


# -- what every trainer of a run shares -------------------------------------------------------------


def is_main_process() -> bool:
    """Rank 0 (accelerate/torchrun export RANK); only it writes run-level files."""
    return int(os.environ.get("RANK", "0") or 0) == 0


def load_callbacks(names: list[str]) -> list[Any]:
    """``package.module:Class`` → callback instances (classes are instantiated without arguments)."""
    import importlib

    out = []
    for name in names:
        module, _, attr = name.partition(":")
        if not module or not attr:
            raise RecipeError(f"callback {name!r}: use 'package.module:Class'")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise RecipeError(f"callback {name!r}: cannot import it ({e})") from None
        out.append(obj() if isinstance(obj, type) else obj)
    return out


def trainer_callbacks(recipe: Recipe) -> list[Any]:
    """The learning rate re-planned on resume (:class:`ReplanLR`, first, so every other callback sees
    the re-planned rate), the recipe's own callbacks, and the final checkpoint (:class:`SaveAtEnd`)."""
    return [ReplanLR(), *load_callbacks(recipe.callbacks), SaveAtEnd()]


_CKPT_RE = re.compile(r"^checkpoint-(\d+)$")


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete ``checkpoint-N`` folder, if any.

    Complete means its ``trainer_state.json`` (the last file the Trainer writes, not atomically)
    parses: a kill -9 while it was being written leaves a folder to skip, not one to crash on.
    """
    d = Path(output_dir)
    if not d.is_dir():
        return None
    found = []
    for p in d.iterdir():
        m = _CKPT_RE.match(p.name)
        if m and (p / "trainer_state.json").is_file():
            try:
                json.loads((p / "trainer_state.json").read_text())
            except (OSError, ValueError):
                logger.warning("skipping %s: trainer_state.json is incomplete (interrupted while saving)", p)
                continue
            found.append((int(m.group(1)), p))
    return max(found)[1] if found else None


def prepare(recipe: Recipe, *, probe: bool = True) -> Recipe:
    """Validate, probe what the run needs from outside (backends, packages; no policy loads yet),
    then build any ``tiny:`` models the recipe names."""
    from vlrl.training.validation import validate

    validate(recipe)
    if probe:
        from vlrl.training.preflight import check

        check(recipe)
    return resolve_tiny(recipe)


@dataclass
class Run:
    """A training run about to start, continue or be reported in ``out`` (see :func:`open_run`)."""

    recipe: Recipe
    out: Path
    checkpoint: Path | None
    """The newest complete checkpoint to continue from (``None``: start from the recipe's model)."""
    finished: dict[str, Any] | None
    """The metrics of a run that already finished: nothing is left to train."""


def open_run(recipe: Recipe, *, resume: bool = True, force: bool = False) -> Run:
    """Everything before the policy loads: validate and probe the recipe, refuse an ``output_dir``
    holding another recipe's run (unless ``force``), find the checkpoint to continue from, and tell a
    finished run apart. The run's identity is recorded only when there is work to do."""
    recipe = prepare(recipe)
    out = Path(recipe.output_dir)
    check_identity(recipe, out, force=force)
    ckpt = latest_checkpoint(out) if resume else None
    if resume and (done := finished_metrics(out, recipe.trainer.get("max_steps"), ckpt)) is not None:
        logger.info("%s: this run already finished at step %s; nothing to train (raise max_steps to continue, or use "
                    "a new output_dir)", out, done.get("global_step"))
        return Run(recipe, out, ckpt, {**done, "status": "already finished"})
    if ckpt:
        logger.info("resuming from %s", ckpt)
    write_identity(recipe, out)
    return Run(recipe, out, ckpt, None)


def train_or_finish(trainer: Any, ckpt: str | None) -> None:
    """``trainer.train(resume_from_checkpoint=ckpt)``, except when ``ckpt`` already holds the final
    step: transformers' resume at ``global_step == max_steps`` trains one step more, so the state is
    restored from the checkpoint instead (its weights are already loaded) and nothing is trained."""
    step = checkpoint_step(Path(ckpt)) if ckpt else None
    max_steps = trainer.args.max_steps
    if step is not None and max_steps > 0 and step >= max_steps:
        from transformers import TrainerState

        trainer.state = TrainerState.load_from_json(str(Path(ckpt) / "trainer_state.json"))
        logger.info("%s holds the final step (%d); finishing without training again", ckpt, step)
        return
    trainer.train(resume_from_checkpoint=ckpt)
