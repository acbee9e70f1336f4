"""YAML training recipes: one file says everything about a run, and is checked before any model loads.

A recipe is a small nested document::

    method: grpo                      # grpo | ptst | sft
    model:    {path, dtype, freeze_vision_tower, lora: {r, alpha, dropout, target_modules}}
    data:     {source, prompt, system_prompt, max_samples}
    rewards:  [{name, weight, settings: {...}, guards: {...}}, ...]
    trainer:  {any GRPOConfig / SFTConfig field}
    stages:   [{max_completion_length, num_generations, steps}, ...]   # PTST only

Why the validation lives here and not in TRL: TRL checks batch geometry inside ``GRPOConfig``,
i.e. after the user has waited for a 7B model, a judge server and a dataset to load. Every mistake a
recipe can contain without touching a model (geometry, unknown reward, a column a reward needs, a
stage list TRL cannot run, a misspelled trainer key) is found by :func:`validate` first, and every
message says what to change.

Command-line overrides are ``dotted.key=value`` pairs whose values are parsed as YAML, so
``trainer.learning_rate=1e-5``, ``stages=[{...}]`` and ``model.lora=null`` all work. A bare key
that is not a top-level section (``output_dir=DIR``, ``max_steps=3``) goes to ``trainer``.

``tiny:ARCH[:SEED]`` (``tiny:qwen2_5_vl``, ``tiny:qwen2:3``) anywhere in a
model path or backend spec is replaced by the folder of a tiny random-weight model built on the fly
(:func:`resolve_tiny`), so the CPU twins of the real recipes run with nothing prepared.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vlrl.core.config import safe_yaml, set_dotted, yaml_numbers

logger = logging.getLogger(__name__)

SECTIONS = ("method", "model", "data", "rewards", "trainer", "stages", "ptst", "callbacks", "run")
METHODS = ("grpo", "ptst", "sft")
DEFAULT_STAGES = (
    {"max_completion_length": 4096, "num_generations": 16, "steps": 100},
    {"max_completion_length": 8192, "num_generations": 8, "steps": 100},
    {"max_completion_length": 16384, "num_generations": 4, "steps": 100},
)


class RecipeError(ValueError):
    """A recipe that cannot run; the message lists every problem and how to fix it."""


@dataclass
class LoraSpec:
    r: int = 16
    """LoRA rank."""
    alpha: int = 32
    """LoRA scaling numerator (``lora_alpha``)."""
    dropout: float = 0.05
    target_modules: list[str] | str = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Module names to adapt. The defaults name only the language model's attention (the Qwen-VL vision
    tower calls its projections ``qkv``/``proj``), so LoRA never touches the vision tower."""


@dataclass
class ModelSpec:
    path: str = ""
    """Local folder, hub id (on machines with a hub), or ``tiny:ARCH`` for a tiny model built on the fly."""
    dtype: str = "auto"
    """``auto`` | ``bfloat16`` | ``float16`` | ``float32``. ``auto`` means bfloat16 on GPU, float32 on CPU."""
    freeze_vision_tower: bool = False
    """Freeze the vision encoder (patch embedding and ViT blocks)."""
    freeze_projector: bool = False
    """Also freeze the vision-language merger/projector (only meaningful with ``freeze_vision_tower``)."""
    attn_implementation: str | None = None
    """e.g. ``flash_attention_2`` on GPU; ``None`` keeps transformers' default (sdpa)."""
    lora: LoraSpec | None = None


@dataclass
class DataSpec:
    source: str = ""
    """A JSONL/JSON/parquet file, a ``save_to_disk`` folder, or ``builtin:tiny_captions[:N]`` /
    ``builtin:tiny_math[:N]`` (generated images for the tiny CPU recipes)."""
    prompt: str = "caption_default.jinja"
    """User prompt for records without their own ``prompt``/``question``: jinja text, or a template named by
    its ``.jinja`` file name or path (default: CapRL's captioning prompt)."""
    system_prompt: str | None = None
    max_samples: int | None = None
    image_root: str | None = None
    """Folder that relative image paths are resolved against (default: the dataset file's folder)."""
    response_column: str = "response"
    """SFT only: the column holding the target assistant turn (cold start writes ``response``)."""
    min_pixels: int | None = None
    """Lower pixel budget per image for the processor (Qwen-VL resizes each image into
    [min_pixels, max_pixels]); ``None`` keeps the processor's default."""
    max_pixels: int | None = None
    """Upper pixel budget per image. Qwen2.5-VL's default is about 12.8 MP (16384 visual tokens), which
    a real-scale run rarely wants; Vision-R1-style recipes set e.g. 1003520 (1280 tokens of 28×28)."""


@dataclass
class RewardSpec:
    name: str
    """A registered reward (``vlrl.rewards.available_rewards()``) or ``package.module:function``."""
    weight: float = 1.0
    settings: dict[str, Any] = field(default_factory=dict)
    guards: dict[str, Any] = field(default_factory=dict)
    """Anti-hacking guards wrapped around this reward (``vlrl.rewards.guards``)."""


@dataclass
class RunSpec:
    max_none_reward_steps: int = 3
    """Stop the run (non-zero exit) after this many consecutive steps in which every reward was
    ``None``: a dead reward backend otherwise gives zero advantages and a run that "succeeds" having
    learnt nothing. 0 turns the stop off."""


@dataclass
class StageSpec:
    max_completion_length: int
    num_generations: int
    steps: int


@dataclass
class Recipe:
    method: str = "grpo"
    model: ModelSpec = field(default_factory=ModelSpec)
    data: DataSpec = field(default_factory=DataSpec)
    rewards: list[RewardSpec] = field(default_factory=list)
    trainer: dict[str, Any] = field(default_factory=dict)
    """Passed through to ``GRPOConfig`` / ``SFTConfig``; unknown keys are an error."""
    stages: list[StageSpec] | None = None
    ptst: dict[str, Any] = field(default_factory=dict)
    """PTST options: ``prompts_per_step`` (default: derived from the trainer block and the first stage)."""
    callbacks: list[str] = field(default_factory=list)
    """Extra ``transformers.TrainerCallback`` classes as ``package.module:Class``."""
    run: RunSpec = field(default_factory=RunSpec)
    """Run-level safety settings (``max_none_reward_steps``)."""
    source: str | None = None
    """The YAML file this recipe came from (for messages)."""

    @property
    def output_dir(self) -> str:
        return str(self.trainer.get("output_dir") or "outputs/run")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("source")
        return d


# -- loading -------------------------------------------------------------------------------------

def parse_overrides(overrides: list[str] | tuple[str, ...]) -> list[tuple[list[str], Any]]:
    """``a.b=value`` → ([a, b], yaml(value)). A bare key outside SECTIONS is a trainer field."""
    out = []
    for item in overrides:
        if "=" not in item:
            raise RecipeError(f"override {item!r}: expected key=value (e.g. trainer.learning_rate=1e-5 or output_dir=DIR)")
        key, _, raw = item.partition("=")
        try:
            value = yaml_numbers(safe_yaml(raw)) if raw != "" else ""
        except yaml.YAMLError as e:
            raise RecipeError(f"override {item!r}: value is not valid YAML ({e})") from None
        parts = key.strip().split(".")
        if parts[0] not in SECTIONS:
            parts = ["trainer", *parts]
        out.append((parts, value))
    return out


def load_recipe(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (), *, doc: dict | None = None) -> Recipe:
    """Read a YAML recipe (or a ready ``doc``), apply ``key=value`` overrides, build a :class:`Recipe`.

    Only structure is checked here; call :func:`validate` for everything that needs the registry,
    the dataset's columns or TRL's config fields.
    """
    if doc is None:
        if path is None:
            raise RecipeError("no recipe given; pass --recipe FILE")
        p = Path(path)
        if not p.is_file():
            raise RecipeError(f"recipe {str(p)!r} does not exist")
        try:
            doc = safe_yaml(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise RecipeError(f"recipe {p}: not valid YAML ({e})") from None
    doc = copy.deepcopy(doc)
    if not isinstance(doc, dict):
        raise RecipeError(f"recipe {path}: the top level must be a mapping of sections {SECTIONS}")
    for key in ("trainer", "stages", "ptst", "run"):
        if key in doc:
            doc[key] = yaml_numbers(doc[key])
    for parts, value in parse_overrides(list(overrides)):
        set_dotted(doc, parts, value)
    return _build(doc, source=str(path) if path else None)


def _build(doc: dict[str, Any], source: str | None) -> Recipe:
    where = source or "recipe"
    unknown = sorted(set(doc) - set(SECTIONS))
    if unknown:
        raise RecipeError(f"{where}: unknown section(s) {unknown}; allowed: {', '.join(SECTIONS)}")

    def make(cls, raw, name):
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise RecipeError(f"{where}: '{name}' must be a mapping, got {type(raw).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(raw) - names)
        if bad:
            raise RecipeError(f"{where}: unknown key(s) {bad} in '{name}'; allowed: {', '.join(sorted(names))}")
        return cls(**raw)

    model_raw = dict(doc.get("model") or {})
    lora = model_raw.pop("lora", None)
    model = make(ModelSpec, model_raw, "model")
    if lora:
        model.lora = make(LoraSpec, lora, "model.lora")
    rewards_raw = doc.get("rewards") or []
    if not isinstance(rewards_raw, list):
        raise RecipeError(f"{where}: 'rewards' must be a list of {{name, weight, settings, guards}}")
    rewards = []
    for i, r in enumerate(rewards_raw):
        if isinstance(r, str):
            r = {"name": r}
        if not isinstance(r, dict) or "name" not in r:
            raise RecipeError(f"{where}: rewards[{i}] needs a 'name' (a registered reward or 'pkg.mod:fn')")
        spec = make(RewardSpec, r, f"rewards[{i}]")
        spec.settings = dict(spec.settings or {})
        spec.guards = dict(spec.guards or {})
        rewards.append(spec)
    stages = None
    if "stages" in doc and doc["stages"] is not None:
        if not isinstance(doc["stages"], list):
            raise RecipeError(f"{where}: 'stages' must be a list of {{max_completion_length, num_generations, steps}}")
        stages = []
        for i, s in enumerate(doc["stages"]):
            if not isinstance(s, dict) or set(s) != {"max_completion_length", "num_generations", "steps"}:
                raise RecipeError(
                    f"{where}: stages[{i}] must have exactly max_completion_length, num_generations and steps; got {s!r}"
                )
            stages.append(StageSpec(**s))
    trainer = doc.get("trainer") or {}
    if not isinstance(trainer, dict):
        raise RecipeError(f"{where}: 'trainer' must be a mapping of GRPOConfig/SFTConfig fields")
    callbacks = doc.get("callbacks") or []
    if isinstance(callbacks, str):
        callbacks = [callbacks]
    return Recipe(
        method=str(doc.get("method") or "grpo"),
        model=model,
        data=make(DataSpec, doc.get("data"), "data"),
        rewards=rewards,
        trainer=dict(trainer),
        stages=stages,
        ptst=dict(doc.get("ptst") or {}),
        callbacks=list(callbacks),
        run=make(RunSpec, doc.get("run"), "run"),
        source=source,
    )


# -- validation (no model is loaded here) ---------------------------------------------------------


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
            if "image" not in cols and "images" not in cols:
                errors.append(f"{where}: dataset {recipe.data.source!r} has no 'image' column (columns: {sorted(cols)})")
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


# -- tiny models on the fly ------------------------------------------------------------------------

_TINY_RE = re.compile(r"(?<![\w/.-])tiny:(qwen2_5_vl|qwen2_vl|qwen3_vl|qwen2)(?::(\d+))?(?![\w])")


def build_tiny(arch: str, seed: int = 0) -> Path:
    """Build (once, atomically, in vlrl's cache) and return the folder of a tiny random-weight model."""
    from vlrl.core.tiny import cached_tiny

    return cached_tiny(arch, seed=seed)


def resolve_tiny(obj: Any) -> Any:
    """Replace every ``tiny:ARCH[:SEED]`` inside strings of a nested structure by a built model folder."""
    if isinstance(obj, str):
        return _TINY_RE.sub(lambda m: str(build_tiny(m.group(1), int(m.group(2) or 0))), obj)
    if isinstance(obj, list):
        return [resolve_tiny(x) for x in obj]
    if isinstance(obj, dict):
        return {k: resolve_tiny(v) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            setattr(obj, f.name, resolve_tiny(getattr(obj, f.name)))
        return obj
    return obj
