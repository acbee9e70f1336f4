"""GRPO on TRL for vision-language models, from a vlrl recipe.

The path reads straight through: recipe → validate and probe, no model yet
(:func:`vlrl.training.runstate.open_run`) → dataset → rewards → policy → ``GRPOConfig`` →
``GRPOTrainer`` → train → save. What vlrl adds on top of TRL, and why:

* **Rewards by name.** Each recipe reward is built with :func:`vlrl.rewards.build_reward` from its own
  settings block; weights become TRL's ``reward_weights``. vlrl rewards report their sub-scores
  through TRL's ``log_metric`` (``<reward>/<detail>``), and TRL logs ``rewards/<name>/mean|std``.
* **Video rows** (:mod:`vlrl.training.video`): TRL 1.16 trains on images only; one adapter feeds
  each row's video to generation and to every log-probability forward.
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
* **LoRA and a frozen vision tower** (:mod:`vlrl.training.policy`). TRL builds a reference model only
  when ``beta != 0`` (and never with LoRA, where disabling the adapter gives the reference), so KL
  costs nothing at ``beta: 0``.
* **Resume that restores the weights.** ``Trainer.train(resume_from_checkpoint=ckpt)`` leaves
  Qwen2/2.5-VL at their base weights (transformers #43701: the checkpoint's keys do not match the
  model's after the VL class refactor, so only warnings are printed). vlrl loads the policy itself
  with ``from_pretrained(ckpt)`` and then passes ``resume_from_checkpoint`` only for the optimizer,
  scheduler, RNG and step (the trainer's own weight loading is skipped). The KL reference stays the
  model the run started from.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from vlrl.core.pipeline import atomic_write_json
from vlrl.training.completions import printable, write_completions
from vlrl.training.recipe import Recipe

logger = logging.getLogger(__name__)


def build_rewards(recipe: Recipe) -> tuple[list[Any], list[float]]:
    """Instantiate every recipe reward (registry name or ``pkg.mod:fn``) with its settings and guards."""
    from vlrl.rewards import build_reward

    funcs, weights = [], []
    for r in recipe.rewards:
        reward = build_reward(r.name, **r.settings, guards=r.guards or None)
        funcs.append(reward)
        weights.append(float(r.weight))
    return funcs, weights


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

    from vlrl.training.video import VideoGRPOMixin

    class VLRLGRPOTrainer(VideoGRPOMixin, GRPOTrainer):
        """GRPOTrainer + completions JSONL with images, reward timing, the None-reward stop and the #43701
        resume workaround. What a ``TrainerCallback`` can do is a callback
        (:func:`vlrl.training.runstate.trainer_callbacks`); each override below says why it is not."""

        _vlrl_weights_from: str | None = None
        _vlrl_generations = 0
        _vlrl_written = 0
        _vlrl_none_guard = None
        _vlrl_reward_s = 0.0
        _vlrl_t_log: float | None = None

        def _generate_and_score_completions(self, *args, **kwargs):
            """Counts fresh generation batches (each is written out once) and starts the step clock.
            An override: no callback event marks a generation, which TRL runs inside ``_prepare_inputs``
            only once every ``steps_per_generation × num_iterations`` micro-steps."""
            self._vlrl_generations += 1
            if self._vlrl_t_log is None:
                self._vlrl_t_log = time.perf_counter()
            return super()._generate_and_score_completions(*args, **kwargs)

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            """Times reward scoring and hands the scores to the None-reward stop. An override: no callback
            event surrounds scoring, and the gathered (completions × functions) tensor, None as NaN for
            every rank, exists only as this method's return value."""
            t0 = time.perf_counter()
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            self._vlrl_reward_s += time.perf_counter() - t0
            if self._vlrl_none_guard is not None:
                self._vlrl_none_guard.observe(rewards, self.reward_funcs, self.accelerator.gather)
            return rewards

        def _load_from_checkpoint(self, resume_from_checkpoint, model=None):
            """Skips loading the weights the policy already holds (#43701). An override: ``Trainer.train``
            calls it before the first callback event (``on_train_begin``), and no event can skip it."""
            if self._vlrl_weights_from and Path(resume_from_checkpoint).resolve() == Path(self._vlrl_weights_from).resolve():
                logger.info("weights already loaded from %s (transformers #43701 workaround)", resume_from_checkpoint)
                return
            super()._load_from_checkpoint(resume_from_checkpoint, model)

        def log(self, logs, start_time=None):
            """Adds the step timing, writes the completions JSONL, and keeps TRL from showing the last
            step's completions a second time with the end-of-training summary. ``log`` is public and meant
            to be overridden; ``on_log`` would be too late for the timing, which must be in the logs
            before ``Trainer.log`` copies them into ``log_history``."""
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
            if not self.log_completions:
                super().log(logs, start_time)
                return
            # TRL prints its completions table (and writes its parquet) from these: control characters
            # a random policy writes go out as \xNN, never raw into the log (completions.printable)
            raw = {k: self._logs[k] for k in ("prompt", "completion")}
            for k, v in raw.items():
                self._logs[k] = type(v)((printable(x) for x in v), maxlen=getattr(v, "maxlen", None))
            try:
                super().log(logs, start_time)
            finally:
                self._logs.update(raw)

    return VLRLGRPOTrainer


def build_config(recipe: Recipe, output_dir: str | None = None, **stage_overrides: Any):
    from trl import GRPOConfig

    from vlrl.training.policy import device_defaults

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
    from vlrl.training.data import load_processor
    from vlrl.training.policy import eos_ids, load_start_policy
    from vlrl.training.runstate import NoneRewardGuard, trainer_callbacks

    start = model_path or recipe.model.path
    cfg = build_config(recipe, output_dir=output_dir, **(stage_overrides or {}))
    if train_dataset is None:
        from vlrl.training.data import to_trl_dataset

        train_dataset = to_trl_dataset(recipe.data, cache_dir=Path(cfg.output_dir) / "_data")
    processor = load_processor(start, recipe.data)
    funcs, weights = build_rewards(recipe)  # before the policy: a bad reward fails before a long load
    cfg.reward_weights = weights
    ckpt = str(resume) if resume else None
    policy, peft_config = load_start_policy(recipe, start, ckpt)
    eos = eos_ids(start)
    for f in funcs:  # hfrrf: a completion that hits the cap without EOS is truncated
        if hasattr(f, "max_completion_length") and f.max_completion_length is None:
            f.max_completion_length = cfg.max_completion_length
        if hasattr(f, "eos_token_ids") and not f.eos_token_ids:
            f.eos_token_ids = eos
    # The KL reference (beta > 0) is rebuilt by TRL from config._name_or_path: keep it the start model.
    base_cfg = policy.get_base_model().config if hasattr(policy, "get_base_model") else policy.config
    base_cfg._name_or_path = start
    trainer = _trainer_class()(
        model=policy,
        reward_funcs=funcs,
        args=cfg,
        train_dataset=train_dataset,
        processing_class=processor,
        peft_config=peft_config,
        callbacks=trainer_callbacks(recipe),
    )
    trainer._vlrl_weights_from = ckpt
    from vlrl.training.data import video_spec

    trainer._vlrl_video_spec = video_spec(recipe.data)  # video rows: the frames the data check decoded
    if "video" in (getattr(train_dataset, "column_names", None) or []):
        from vlrl.training.video import suppress_video_token

        suppress_video_token(trainer)
    trainer._vlrl_none_guard = NoneRewardGuard(recipe.run.max_none_reward_steps)
    return trainer, ckpt


def close_rewards(trainer: Any) -> None:
    """Close rewards that hold backends (answerers, judges): frees them and logs their accounting."""
    for fn in getattr(trainer, "reward_funcs", []):
        close = getattr(fn, "close", None)
        if callable(close):
            close()


def finish_run(trainer: Any, run: Any, **extra: Any) -> dict[str, Any]:
    """Save the policy into ``run.out`` (a :class:`vlrl.training.runstate.Run`) and write the run's
    ``metrics.json``; returns the metrics."""
    from vlrl.training.runstate import is_main_process

    trainer.save_model(str(run.out))
    metrics = summarize_history(trainer.state.log_history)
    metrics.update(global_step=trainer.state.global_step, max_steps=trainer.state.max_steps, finished=True, **extra)
    if is_main_process():
        atomic_write_json(run.out / "metrics.json", metrics)
    return metrics


def run_grpo(recipe: Recipe, resume: bool = True, force: bool = False) -> dict[str, Any]:
    """Train with GRPO; with ``resume`` (default), continue from the newest checkpoint in output_dir.

    A finished run is reported and not trained again; an ``output_dir`` holding another recipe's run
    is refused unless ``force`` (see :mod:`vlrl.training.runstate`). ``vlrl train grpo`` and
    ``train/grpo.py`` reach it through :func:`vlrl.training.entry.run`.
    """
    from vlrl.training.data import to_trl_dataset
    from vlrl.training.runstate import check_data_stream, open_run, train_or_finish
    from vlrl.training.validation import world_size

    run = open_run(recipe, resume=resume, force=force)
    if run.finished is not None:
        return run.finished
    dataset = to_trl_dataset(run.recipe.data, cache_dir=run.out / "_data")
    # the rows the sampler shuffles, not only the recipe, and the processes the resume skips batches on
    check_data_stream(dataset, run.out, force=force, resume=resume, world=world_size())
    trainer, resume_from = build_trainer(run.recipe, resume=run.checkpoint, train_dataset=dataset)
    try:
        train_or_finish(trainer, resume_from)
    finally:
        close_rewards(trainer)
    return finish_run(trainer, run)
