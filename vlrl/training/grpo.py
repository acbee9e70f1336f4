"""GRPO on TRL for vision-language models, from a vlrl recipe.

The path reads straight through: recipe → validate (no model yet) → dataset → rewards → policy →
``GRPOConfig`` → ``GRPOTrainer`` → train → save. What vlrl adds on top of TRL, and why:

* **Rewards by name.** Each recipe reward is built with :func:`vlrl.rewards.build_reward` from its own
  settings block; weights become TRL's ``reward_weights``. vlrl rewards report their sub-scores
  through TRL's ``log_metric`` (``<reward>/<detail>``), and TRL logs ``rewards/<name>/mean|std``.
* **Completions with their images.** Besides TRL's ``log_completions`` (rich table, parquet, wandb),
  every logging step after a fresh generation writes ``<output_dir>/completions/step-NNNNN.jsonl``
  (prompt text, completion, per-reward values, advantage, image file) and the images once each under
  ``completions/images/``, so a run can be audited without wandb.
* **CPU just works.** With no CUDA device, ``use_cpu=True, bf16=False`` are set (TRL otherwise stops
  with "Your setup doesn't support bf16/gpu").
* **Generation engine.** TRL's own ``generate`` by default; vLLM through TRL's options
  (``use_vllm: true`` with ``vllm_mode: colocate`` — vLLM inside each training process — or
  ``vllm_mode: server`` with ``vllm_server_base_url`` pointing at a ``vllm serve`` started with TRL's
  weight-transfer flags). vlrl passes them through untouched; see docs/training.md.
* **LoRA and a frozen vision tower.** ``model.lora`` builds a peft ``LoraConfig`` (TRL wraps the model);
  ``model.freeze_vision_tower`` freezes the ViT (the merger stays trainable unless
  ``freeze_projector``). TRL builds a reference model only when ``beta != 0`` (and never with LoRA,
  where disabling the adapter gives the reference), so KL costs nothing at ``beta: 0``.
* **Resume that restores the weights.** ``Trainer.train(resume_from_checkpoint=ckpt)`` leaves
  Qwen2/2.5-VL at their base weights (transformers #43701: the checkpoint's keys do not match the
  model's after the VL class refactor, so only warnings are printed). vlrl loads the policy itself
  with ``from_pretrained(ckpt)`` and then passes ``resume_from_checkpoint`` only for the optimizer,
  scheduler, RNG and step (the trainer's own weight loading is skipped). The KL reference stays the
  model the run started from.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import atomic_write_json
from vlrl.training.recipe import Recipe, RecipeError, resolve_tiny, validate

logger = logging.getLogger(__name__)

VISION_MODULE_NAMES = ("visual", "vision_tower", "vision_model")
PROJECTOR_HINTS = ("merger", "multi_modal_projector", "mm_projector")


# -- pieces ------------------------------------------------------------------------------------------


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def device_defaults(kwargs: dict[str, Any]) -> dict[str, Any]:
    """CPU runs need ``use_cpu=True, bf16=False``; GPU runs default to bf16. Explicit values win."""
    out = dict(kwargs)
    if not cuda_available():
        out["use_cpu"] = True
        out["bf16"] = False
        out["fp16"] = False
    else:
        out.setdefault("bf16", True)
    out.setdefault("report_to", "none")
    return out


def torch_dtype(name: str):
    import torch

    if name == "auto":
        return torch.bfloat16 if cuda_available() else torch.float32
    return getattr(torch, name)


def is_vlm(path: str) -> bool:
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(path)
    return getattr(cfg, "vision_config", None) is not None


def load_policy(path: str, model_spec, *, trainable_adapter_from: str | None = None):
    """Load the policy from ``path`` (a base model or a full checkpoint folder).

    With LoRA and ``trainable_adapter_from`` (a LoRA checkpoint), the adapter is loaded on top of
    the base and left trainable.
    """
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    kwargs: dict[str, Any] = {"dtype": torch_dtype(model_spec.dtype)}
    if model_spec.attn_implementation:
        kwargs["attn_implementation"] = model_spec.attn_implementation
    cls = AutoModelForImageTextToText if is_vlm(path) else AutoModelForCausalLM
    model = cls.from_pretrained(path, **kwargs)
    if trainable_adapter_from:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, trainable_adapter_from, is_trainable=True)
    if model_spec.freeze_vision_tower:
        freeze_vision_tower(model, keep_projector=not model_spec.freeze_projector)
    return model


def freeze_vision_tower(model, keep_projector: bool = True) -> int:
    """Freeze the vision encoder's parameters; returns how many tensors were frozen."""
    frozen = 0
    for name, p in model.named_parameters():
        parts = name.split(".")
        if not any(v in parts for v in VISION_MODULE_NAMES):
            continue
        if keep_projector and any(h in parts for h in PROJECTOR_HINTS):
            continue
        p.requires_grad_(False)
        frozen += 1
    if frozen == 0:
        logger.warning("freeze_vision_tower: no parameter under %s found; nothing frozen", VISION_MODULE_NAMES)
    else:
        logger.info("froze %d vision-tower tensors", frozen)
    return frozen


def lora_config(spec):
    from peft import LoraConfig

    return LoraConfig(
        r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout, target_modules=spec.target_modules, task_type="CAUSAL_LM"
    )


def build_rewards(recipe: Recipe) -> tuple[list[Any], list[float]]:
    """Instantiate every recipe reward (registry name or ``pkg.mod:fn``) with its settings and guards."""
    from vlrl.rewards import build_reward

    funcs, weights = [], []
    for r in recipe.rewards:
        reward = build_reward(r.name, **r.settings, guards=r.guards or None)
        funcs.append(reward)
        weights.append(float(r.weight))
    return funcs, weights


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


def is_main_process() -> bool:
    """Rank 0 (accelerate/torchrun export RANK); only it writes run-level files."""
    return int(os.environ.get("RANK", "0") or 0) == 0


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


def summarize_history(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Run-level metrics from ``trainer.state.log_history``: completion lengths, truncation, reward."""

    def vals(key):
        return [h[key] for h in history if isinstance(h.get(key), (int, float))]

    out: dict[str, Any] = {}
    for key, name, agg in (
        ("completions/mean_length", "completion_length_mean", "mean"),
        ("completions/max_length", "completion_length_max", "max"),
        ("completions/clipped_ratio", "truncation_rate", "mean"),
        ("reward", "reward_mean", "mean"),
    ):
        v = vals(key)
        if v:
            out[name] = max(v) if agg == "max" else sum(v) / len(v)
    if r := vals("reward"):
        out["reward_last"] = r[-1]
    for key in {k for h in history for k in h if k.startswith("rewards/") and k.endswith("/mean")}:
        if v := vals(key):
            out[key] = sum(v) / len(v)
    out["logged_steps"] = len(vals("reward"))
    from vlrl.training.runstate import reward_share

    share = reward_share(history)
    if share is not None:
        out["reward_time_share"] = share
        out["reward_time_s"] = sum(vals("timing/reward_s"))
    return out


# -- trainer ------------------------------------------------------------------------------------------


def _trainer_class():
    from trl import GRPOTrainer

    class VLRLGRPOTrainer(GRPOTrainer):
        """GRPOTrainer + completions JSONL with images + the #43701 resume workaround."""

        _vlrl_weights_from: str | None = None
        _vlrl_generations = 0
        _vlrl_written = 0
        _vlrl_none_guard = None
        _vlrl_reward_s = 0.0
        _vlrl_t_log: float | None = None

        def _generate_and_score_completions(self, *args, **kwargs):
            self._vlrl_generations += 1
            if self._vlrl_t_log is None:
                self._vlrl_t_log = time.perf_counter()
            return super()._generate_and_score_completions(*args, **kwargs)

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            t0 = time.perf_counter()
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            self._vlrl_reward_s += time.perf_counter() - t0
            if self._vlrl_none_guard is not None:
                self._vlrl_none_guard.observe(rewards)
            return rewards

        def _load_optimizer_and_scheduler(self, checkpoint):
            super()._load_optimizer_and_scheduler(checkpoint)
            if checkpoint is not None:
                from vlrl.training.runstate import replan_lr

                replan_lr(self.lr_scheduler, self.optimizer)

        def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
            if self._vlrl_weights_from and Path(resume_from_checkpoint).resolve() == Path(self._vlrl_weights_from).resolve():
                logger.info("weights already loaded from %s (transformers #43701 workaround)", resume_from_checkpoint)
                return
            super()._load_from_checkpoint(resume_from_checkpoint, model)

        def log(self, logs, start_time=None):
            if "loss" in logs and self._vlrl_t_log is not None:  # reward time as a share of step time
                now = time.perf_counter()
                step_s, self._vlrl_t_log = now - self._vlrl_t_log, now
                logs["timing/step_s"] = step_s
                logs["timing/reward_s"] = self._vlrl_reward_s
                logs["timing/reward_share"] = self._vlrl_reward_s / step_s if step_s > 0 else 0.0
                self._vlrl_reward_s = 0.0
            if self.accelerator.is_main_process and self._vlrl_generations > self._vlrl_written and "loss" in logs:
                try:
                    write_completions(self._logs, Path(self.args.output_dir), self.state.global_step)
                except Exception as e:  # noqa: BLE001 - logging must never stop training
                    logger.warning("could not write sampled completions: %s", e)
                self._vlrl_written = self._vlrl_generations
            if "loss" not in logs and self.log_completions:
                # The end-of-training summary (train_runtime, ...): TRL would print and log the last
                # step's completions table a second time.
                self.log_completions = False
                try:
                    super().log(logs, start_time)
                finally:
                    self.log_completions = True
                return
            super().log(logs, start_time)

    return VLRLGRPOTrainer


def _message_text(messages: Any) -> str:
    if isinstance(messages, str):
        return messages
    parts = []
    for m in messages or []:
        c = m.get("content")
        if isinstance(c, list):
            c = "".join(p.get("text", "") for p in c if p.get("type") == "text")
        parts.append(f"{m.get('role')}: {c}")
    return "\n".join(parts)


def write_completions(logs: dict[str, Any], output_dir: Path, step: int) -> Path:
    """Write the latest generation batch to ``completions/step-NNNNN.jsonl`` (images saved once each)."""
    out = output_dir / "completions"
    img_dir = out / "images"
    img_dir.mkdir(parents=True, exist_ok=True)
    prompts, completions = list(logs["prompt"]), list(logs["completion"])
    images = list(logs.get("images") or [])
    rewards = {k: list(v) for k, v in logs["rewards"].items()}
    adv = list(logs["advantages"])
    extra = {k: list(v) for k, v in (logs.get("extra") or {}).items()}
    path = out / f"step-{step:05d}.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for i, (p, c) in enumerate(zip(prompts, completions, strict=False)):
            files = []
            for img in (images[i] if i < len(images) and images[i] else []):
                if hasattr(img, "tobytes"):
                    name = hashlib.sha1(img.tobytes()).hexdigest()[:16] + ".png"
                    if not (img_dir / name).exists():
                        img.save(img_dir / name)
                    files.append(f"images/{name}")
            rec = {
                "step": step,
                "prompt": _message_text(p),
                "completion": _message_text(c).removeprefix("assistant: "),
                "images": files,
                "rewards": {k: (v[i] if i < len(v) else None) for k, v in rewards.items()},
                "advantage": adv[i] if i < len(adv) else None,
            }
            for k, v in extra.items():  # reward-logged columns, e.g. hfrrf's gold answer and parsed prediction
                rec.setdefault(k, v[i] if i < len(v) else None)
            fh.write(json.dumps(rec, ensure_ascii=False, default=str) + "\n")
    return path


def build_config(recipe: Recipe, output_dir: str | None = None, **stage_overrides: Any):
    from trl import GRPOConfig

    kwargs = dict(recipe.trainer)
    kwargs.update(stage_overrides)
    if output_dir is not None:
        kwargs["output_dir"] = output_dir
    kwargs.setdefault("output_dir", recipe.output_dir)
    kwargs = device_defaults(kwargs)
    return GRPOConfig(**kwargs)


def build_trainer(
    recipe: Recipe,
    *,
    model_path: str | None = None,
    resume: str | Path | None = None,
    output_dir: str | None = None,
    train_dataset=None,
    stage_overrides: dict[str, Any] | None = None,
):
    """A ready ``GRPOTrainer``. ``resume`` is a checkpoint folder whose weights the policy loads.

    Returns ``(trainer, resume_from_checkpoint)``; pass the second to ``trainer.train``.
    """
    from vlrl.training.runstate import NoneRewardGuard, SaveAtEnd

    start = model_path or recipe.model.path
    cfg = build_config(recipe, output_dir=output_dir, **(stage_overrides or {}))
    if train_dataset is None:
        from vlrl.training.data import to_trl_dataset

        train_dataset = to_trl_dataset(recipe.data, cache_dir=Path(cfg.output_dir) / "_data")
    funcs, weights = build_rewards(recipe)
    cfg.reward_weights = weights
    eos = _eos_ids(start)
    for f in funcs:  # hfrrf: a completion that hits the cap without EOS is truncated
        if hasattr(f, "max_completion_length") and f.max_completion_length is None:
            f.max_completion_length = cfg.max_completion_length
        if hasattr(f, "eos_token_ids") and not f.eos_token_ids:
            f.eos_token_ids = eos
    lora = recipe.model.lora
    ckpt = str(resume) if resume else None
    if ckpt and lora:
        policy = load_policy(start, recipe.model, trainable_adapter_from=ckpt)
        peft_config = None
    elif ckpt:
        policy = load_policy(ckpt, recipe.model)
        peft_config = None
    else:
        policy = load_policy(start, recipe.model)
        peft_config = lora_config(lora) if lora else None
    # The KL reference (beta > 0) is rebuilt by TRL from config._name_or_path: keep it the start model.
    base_cfg = policy.get_base_model().config if hasattr(policy, "get_base_model") else policy.config
    base_cfg._name_or_path = start
    from vlrl.training.data import load_processor

    processor = load_processor(start, recipe.data)
    cls = _trainer_class()
    trainer = cls(
        model=policy,
        reward_funcs=funcs,
        args=cfg,
        train_dataset=train_dataset,
        processing_class=processor,
        peft_config=peft_config,
        callbacks=[*load_callbacks(recipe.callbacks), SaveAtEnd()],
    )
    trainer._vlrl_weights_from = ckpt
    trainer._vlrl_none_guard = NoneRewardGuard(recipe.run.max_none_reward_steps)
    return trainer, ckpt


def _eos_ids(path: str) -> set[int]:
    """Token ids that end a generation: the generation config's (often several for chat models) and
    the tokenizer's."""
    from transformers import AutoTokenizer, GenerationConfig

    ids: set[int] = set()
    try:
        eos = GenerationConfig.from_pretrained(path).eos_token_id
        ids |= set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
    except (OSError, ValueError):
        pass
    try:
        tok = AutoTokenizer.from_pretrained(path)
        if tok.eos_token_id is not None:
            ids.add(tok.eos_token_id)
    except (OSError, ValueError):
        pass
    return ids


def prepare(recipe: Recipe, *, probe: bool = True) -> Recipe:
    """Validate, probe what the run needs from outside (backends, packages; no policy loads yet),
    then build any ``tiny:`` models the recipe names."""
    validate(recipe)
    if probe:
        from vlrl.training.preflight import check

        check(recipe)
    return resolve_tiny(recipe)


def train_or_finish(trainer: Any, ckpt: str | None) -> None:
    """``trainer.train(resume_from_checkpoint=ckpt)``, except when ``ckpt`` already holds the final
    step: transformers' resume at ``global_step == max_steps`` trains one step more, so the state is
    restored from the checkpoint instead (its weights are already loaded) and nothing is trained."""
    from vlrl.training.runstate import checkpoint_step

    step = checkpoint_step(Path(ckpt)) if ckpt else None
    max_steps = trainer.args.max_steps
    if step is not None and max_steps > 0 and step >= max_steps:
        from transformers import TrainerState

        trainer.state = TrainerState.load_from_json(str(Path(ckpt) / "trainer_state.json"))
        logger.info("%s holds the final step (%d); finishing without training again", ckpt, step)
        return
    trainer.train(resume_from_checkpoint=ckpt)


def close_rewards(trainer: Any) -> None:
    """Close rewards that hold backends (answerers, judges): frees them and logs their accounting."""
    for fn in getattr(trainer, "reward_funcs", []):
        close = getattr(fn, "close", None)
        if callable(close):
            close()


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
    from vlrl.training.runstate import check_identity, finished_metrics, write_identity

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


def finish_run(trainer: Any, run: Run, **extra: Any) -> dict[str, Any]:
    """Save the policy into ``output_dir`` and write the run's ``metrics.json``; returns the metrics."""
    trainer.save_model(str(run.out))
    metrics = summarize_history(trainer.state.log_history)
    metrics.update(global_step=trainer.state.global_step, max_steps=trainer.state.max_steps, finished=True, **extra)
    if is_main_process():
        atomic_write_json(run.out / "metrics.json", metrics)
    return metrics


def run_grpo(recipe: Recipe, resume: bool = True, force: bool = False) -> dict[str, Any]:
    """Train with GRPO; with ``resume`` (default), continue from the newest checkpoint in output_dir.

    A finished run is reported and not trained again; an ``output_dir`` holding another recipe's run
    is refused unless ``force`` (see :mod:`vlrl.training.runstate`). ``train/grpo.py`` spells out
    the same steps.
    """
    run = open_run(recipe, resume=resume, force=force)
    if run.finished is not None:
        return run.finished
    trainer, resume_from = build_trainer(run.recipe, resume=run.checkpoint)
    try:
        train_or_finish(trainer, resume_from)
    finally:
        close_rewards(trainer)
    return finish_run(trainer, run)
