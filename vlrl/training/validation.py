"""Every check a recipe gets before any model loads, and the PTST stage plan.

Why the validation lives here and not in TRL: TRL checks batch geometry inside ``GRPOConfig``,
i.e. after the user has waited for a 7B model, a judge server and a dataset to load. Every mistake a
recipe can contain without touching a model (geometry, unknown reward, a column a reward needs, a
stage list TRL cannot run, a misspelled trainer key) is found by :func:`validate` first, and every
message says what to change. :mod:`vlrl.training.preflight` then checks the world the recipe names
(backends answering, packages installed).

The PTST plan (:func:`plan_stages`) lives here because validating a PTST recipe means planning it:
a stage list whose batch geometry cannot be split is found before the first stage starts.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from vlrl.training.recipe import METHODS, Recipe, RecipeError, StageSpec

# Vision-R1's PTST schedule, used when a PTST recipe lists no stages.
DEFAULT_STAGES = (
    {"max_completion_length": 4096, "num_generations": 16, "steps": 100},
    {"max_completion_length": 8192, "num_generations": 8, "steps": 100},
    {"max_completion_length": 16384, "num_generations": 4, "steps": 100},
)


def world_size() -> int:
    """Number of training processes: accelerate/torchrun export WORLD_SIZE before the script runs."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def config_fields(method: str) -> set[str]:
    """The trainer keys TRL's config accepts.

    Read from TRL's (and transformers') source with ``ast`` rather than by importing ``trl``: the
    import costs 15-20 s and ``vlrl train check`` must answer in about 2. Falls back to the import
    when the source cannot be followed (a compiled or rearranged install).
    """
    module, name = ("trl.trainer.sft_config", "SFTConfig") if method == "sft" else ("trl.trainer.grpo_config", "GRPOConfig")
    try:
        from vlrl.training.trl_fields import source_fields

        return source_fields(module, name)
    except (LookupError, OSError, SyntaxError, ValueError):
        pass
    if method == "sft":
        from trl import SFTConfig as cfg_cls
    else:
        from trl import GRPOConfig as cfg_cls
    return {f.name for f in dataclasses.fields(cfg_cls)}


def generation_geometry(trainer: dict[str, Any], world: int) -> tuple[int, int]:
    """(generation batch size, completions per optimizer step) exactly as GRPOConfig derives them.

    TRL counts *completions*, not prompts: the generation batch is ``per_device_train_batch_size ×
    world_size × steps_per_generation`` (``steps_per_generation`` defaults to
    ``gradient_accumulation_steps``), unless ``generation_batch_size`` is set explicitly.
    """
    pdb = int(trainer.get("per_device_train_batch_size", 8))
    ga = int(trainer.get("gradient_accumulation_steps", 1))
    spg = trainer.get("steps_per_generation")
    gbs = trainer.get("generation_batch_size")
    if gbs is None:
        gbs = pdb * world * int(spg if spg is not None else ga)
    return int(gbs), pdb * world * ga


def check_geometry(trainer: dict[str, Any], num_generations: int, world: int, where: str) -> list[str]:
    errors = []
    pdb = int(trainer.get("per_device_train_batch_size", 8))
    if trainer.get("generation_batch_size") is not None and trainer.get("steps_per_generation") is not None:
        errors.append(f"{where}: set either trainer.generation_batch_size or trainer.steps_per_generation, not both")
        return errors
    gbs, _ = generation_geometry(trainer, world)
    if trainer.get("generation_batch_size") is not None and gbs % (pdb * world):
        errors.append(
            f"{where}: generation_batch_size ({gbs}) must be a multiple of per_device_train_batch_size × world size "
            f"({pdb} × {world} = {pdb * world})"
        )
    if num_generations < 2:
        errors.append(f"{where}: num_generations is {num_generations}; GRPO needs at least 2 completions per prompt")
    elif gbs % num_generations:
        ok = [g for g in range(2, gbs + 1) if gbs % g == 0]
        errors.append(
            f"{where}: the generation batch (per_device_train_batch_size × gradient_accumulation_steps or "
            f"steps_per_generation × world size = {gbs}) is not divisible by num_generations ({num_generations}); "
            f"change num_generations to one of {ok[:8]} or make the batch a multiple of {num_generations} "
            f"(e.g. per_device_train_batch_size={num_generations})"
        )
    return errors


def check_stages(stages: list[StageSpec] | None, where: str) -> list[str]:
    if stages is None:
        return []
    if not stages:
        return [f"{where}: 'stages' is empty; list at least one {{max_completion_length, num_generations, steps}} "
                "or remove the key to use the PTST default (4096/16 → 8192/8 → 16384/4)"]
    errors = []
    for i, s in enumerate(stages):
        for key in ("max_completion_length", "num_generations", "steps"):
            v = getattr(s, key)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                errors.append(f"{where}: stages[{i}].{key} is {v!r}; it must be a positive integer")
        if isinstance(s.num_generations, int) and 0 < s.num_generations < 2:
            errors.append(f"{where}: stages[{i}].num_generations is {s.num_generations}; GRPO needs at least 2 per prompt")
    caps = [s.max_completion_length for s in stages]
    if all(isinstance(c, int) for c in caps):
        for i in range(1, len(caps)):
            if caps[i] < caps[i - 1]:  # each stage starts from the previous one's weights: caps only grow
                errors.append(
                    f"{where}: stages[{i}].max_completion_length ({caps[i]}) is below stages[{i - 1}]'s ({caps[i - 1]}); "
                    "PTST stages must not shrink the length cap: order the stages by max_completion_length"
                )
    return errors


def _looks_local(path: str) -> bool:
    """A filesystem path, not a hub id (``org/name``) or a ``tiny:`` spec."""
    return isinstance(path, str) and path.startswith(("/", "./", "../", "~", "."))


def validate(recipe: Recipe, columns: set[str] | None = None, world: int | None = None) -> None:
    """Every check that needs no model: raises :class:`RecipeError` listing all problems at once."""
    from vlrl.training.data import dataset_columns

    where = recipe.source or "recipe"
    world = world or world_size()
    errors: list[str] = []
    if recipe.method not in METHODS:
        errors.append(f"{where}: method {recipe.method!r} is unknown; use one of {METHODS}")
    if not recipe.model.path:
        errors.append(f"{where}: model.path is empty; give a local model folder or tiny:qwen2_5_vl")
    elif _looks_local(recipe.model.path) and not Path(recipe.model.path).expanduser().is_dir():
        errors.append(f"{where}: model.path {recipe.model.path!r} is not a folder; give an existing model folder, "
                      "a hub id (org/name) or tiny:qwen2_5_vl")
    if recipe.model.dtype not in ("auto", "bfloat16", "float16", "float32"):
        errors.append(f"{where}: model.dtype {recipe.model.dtype!r}; use auto, bfloat16, float16 or float32")
    if not recipe.data.source:
        errors.append(f"{where}: data.source is empty; give a JSONL/parquet file, a dataset folder or builtin:tiny_captions")
    if recipe.data.prompt.endswith(".jinja"):
        from vlrl.core.prompts import PromptNotFoundError, load_template

        try:
            load_template(recipe.data.prompt)
        except PromptNotFoundError as e:
            errors.append(f"{where}: data.prompt: {e}")

    fields = config_fields(recipe.method)
    unknown = sorted(set(recipe.trainer) - fields)
    if unknown:
        import difflib

        hints = [f"{k} (did you mean {m[0]}?)" if (m := difflib.get_close_matches(k, fields, 1)) else k for k in unknown]
        cfg = "SFTConfig" if recipe.method == "sft" else "GRPOConfig"
        errors.append(f"{where}: unknown trainer key(s) {', '.join(hints)}; trainer accepts {cfg} fields only")

    from vlrl.training.values import value_problems

    bad_values = value_problems(recipe)
    errors += [f"{where}: {p}" for p in bad_values]
    if recipe.method in ("grpo", "ptst") and not bad_values:
        if not recipe.rewards:
            errors.append(f"{where}: no rewards; add at least one under 'rewards:' (e.g. - name: hfrrf)")
        if recipe.method == "grpo":
            if recipe.stages is not None:
                errors.append(f"{where}: 'stages' is set but method is grpo; run it with `vlrl train ptst` (method: ptst)")
            errors += check_geometry(recipe.trainer, int(recipe.trainer.get("num_generations", 8)), world, where)
            mcl = recipe.trainer.get("max_completion_length", 1)
            if not isinstance(mcl, int) or mcl <= 0:
                errors.append(f"{where}: trainer.max_completion_length is {mcl!r}; it must be a positive integer")
        else:
            errors += check_stages(recipe.stages, where)
            if not errors:
                try:
                    plan_stages(recipe, world)
                except RecipeError as e:
                    errors.append(str(e))
        steps = recipe.trainer.get("max_steps")
        if isinstance(steps, float) and steps.is_integer():
            steps = recipe.trainer["max_steps"] = int(steps)
        if steps is not None and (not isinstance(steps, int) or (steps <= 0 and steps != -1)):
            errors.append(f"{where}: trainer.max_steps is {steps!r}; use a positive integer (or -1 for epochs)")

    reward_objs_needed: dict[str, tuple[str, ...]] = {}
    for i, r in enumerate(recipe.rewards):
        try:
            reward_objs_needed[r.name] = required_columns_of(r.name, r.settings, r.guards)
        except ValueError as e:
            errors.append(f"{where}: rewards[{i}]: {e}")
        if not isinstance(r.weight, (int, float)) or isinstance(r.weight, bool):
            errors.append(f"{where}: rewards[{i}].weight must be a number, got {r.weight!r}")

    if recipe.data.source:
        try:
            cols = columns if columns is not None else dataset_columns(recipe.data)
        except (OSError, ValueError) as e:
            errors.append(f"{where}: data.source: {e}")
            cols = None
        if cols is not None:
            if recipe.method == "sft" and recipe.data.response_column not in cols:
                errors.append(
                    f"{where}: SFT needs the target text in column {recipe.data.response_column!r}, but "
                    f"{recipe.data.source!r} has {sorted(cols)}; set data.response_column"
                )
            if "image" not in cols and "images" not in cols and "video" not in cols:
                errors.append(f"{where}: dataset {recipe.data.source!r} has no 'image' or video column (columns: {sorted(cols)})")
            if "video" in cols and "image" not in cols:
                errors += video_errors(recipe, where)
            for name, needed in reward_objs_needed.items():
                missing = [c for c in needed if c not in cols]
                if missing:
                    errors.append(
                        f"{where}: reward {name!r} needs dataset column(s) {missing}, but {recipe.data.source!r} has "
                        f"{sorted(cols)}; add the column(s) or choose a reward that fits this dataset"
                    )
    if errors:
        raise RecipeError("recipe cannot run:\n  - " + "\n  - ".join(errors))


def required_columns_of(name: str, settings: dict[str, Any] | None = None, guards: dict[str, Any] | None = None) -> tuple[str, ...]:
    """Columns a reward needs. vlrl rewards build their models lazily, so building one here is cheap
    and also checks its settings (a bad ``mode``, a misspelled keyword) before any model loads."""
    from vlrl.rewards import build_reward, get_reward_factory

    get_reward_factory(name)  # unknown name → ValueError listing the registered ones
    try:
        reward = build_reward(name, **(settings or {}))
    except (TypeError, ValueError) as e:
        raise ValueError(f"reward {name!r}: bad settings ({e})") from None
    if guards:
        from vlrl.rewards.guards import with_guards

        try:
            reward = with_guards(reward, **guards)
        except (TypeError, ValueError) as e:
            raise ValueError(f"reward {name!r}: bad guards ({e})") from None
    return tuple(getattr(reward, "required_columns", ()) or ())


# -- PTST stage plans ------------------------------------------------------------------------------


def stages_of(recipe: Recipe) -> list[StageSpec]:
    return list(recipe.stages) if recipe.stages is not None else [StageSpec(**s) for s in DEFAULT_STAGES]


def plan_stages(recipe: Recipe, world: int | None = None) -> list[dict[str, Any]]:
    """Per-stage trainer overrides with constant prompts per step. Raises :class:`RecipeError`."""
    world = world or world_size()
    where = recipe.source or "recipe"
    stages = stages_of(recipe)
    if not stages:
        raise RecipeError(f"{where}: 'stages' is empty")
    pdb = int(recipe.trainer.get("per_device_train_batch_size", 8))
    ga = int(recipe.trainer.get("gradient_accumulation_steps", 1))
    prompts = recipe.ptst.get("prompts_per_step")
    if prompts is None:
        completions = pdb * ga * world
        g1 = stages[0].num_generations
        if completions % g1:
            raise RecipeError(
                f"{where}: per_device_train_batch_size × gradient_accumulation_steps × world size = {completions} "
                f"completions per step is not divisible by the first stage's num_generations ({g1}); set "
                f"ptst.prompts_per_step, or make the product a multiple of {g1}"
            )
        prompts = completions // g1
    if not isinstance(prompts, int) or prompts <= 0:
        raise RecipeError(f"{where}: ptst.prompts_per_step is {prompts!r}; it must be a positive integer")
    plan = []
    for i, s in enumerate(stages):
        total = prompts * s.num_generations
        if total % world:
            raise RecipeError(
                f"{where}: stage {i + 1}: {prompts} prompts × {s.num_generations} generations = {total} completions "
                f"cannot be split over {world} processes; choose ptst.prompts_per_step so that it is a multiple of {world}"
            )
        per_proc = total // world
        micro = max(d for d in range(1, min(pdb, per_proc) + 1) if per_proc % d == 0)
        acc = per_proc // micro
        plan.append({
            "stage": i + 1,
            "max_completion_length": s.max_completion_length,
            "num_generations": s.num_generations,
            "max_steps": s.steps,
            "per_device_train_batch_size": micro,
            "gradient_accumulation_steps": acc,
            "steps_per_generation": acc,
            "generation_batch_size": None,
            "prompts_per_step": prompts,
        })
    return plan


def video_errors(recipe: Any, where: str) -> list[str]:
    """What stops a recipe on video rows before any model loads: GRPO only, TRL's own generation
    (TRL 1.16's vLLM rollouts pass images only; :mod:`vlrl.training.video`), a valid ``data.video``."""
    from vlrl.training.data import video_spec

    errors = []
    if recipe.method != "grpo":
        errors.append(f"{where}: video rows train with GRPO only (method: {recipe.method})")
    if recipe.trainer.get("use_vllm"):
        errors.append(f"{where}: video rows need trainer.use_vllm: false (TRL 1.16's vLLM rollouts pass images only; "
                      "docs/training.md, 'Video')")
    try:
        video_spec(recipe.data)
    except ValueError as e:
        errors.append(f"{where}: {e}")
    return errors
