"""YAML training recipes: one file says everything about a run, and is checked before any model loads.

A recipe is a small nested document::

    method: grpo                      # grpo | ptst | sft
    model:    {path, dtype, freeze_vision_tower, lora: {r, alpha, dropout, target_modules}}
    data:     {source, prompt, system_prompt, max_samples}
    rewards:  [{name, weight, settings: {...}, guards: {...}}, ...]
    trainer:  {any GRPOConfig / SFTConfig field}
    stages:   [{max_completion_length, num_generations, steps}, ...]   # PTST only

This module reads a recipe and checks its *structure* (known sections and keys, the shapes of
rewards and stages); everything that needs the reward registry, the dataset's columns or TRL's
config fields is checked by :func:`vlrl.training.validation.validate`, still before any model loads.

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
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from vlrl.core.config import safe_yaml, set_dotted, yaml_numbers

SECTIONS = ("method", "model", "data", "rewards", "trainer", "stages", "ptst", "callbacks", "run")
METHODS = ("grpo", "ptst", "sft")


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
    """Freeze the vision encoder (patch and position embeddings, ViT blocks); the mergers (Qwen3-VL's
    DeepStack mergers included) stay trainable. Default false: the whole model trains. Without effect
    under LoRA, where only the adapter trains (docs/training.md, "What trains")."""
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
    video: dict[str, Any] = field(default_factory=dict)
    """Video rows (a ``videos``/``video``/``video_path`` column): how frames are sampled and sized, in
    qwen-vl-utils' keys (``fps``, ``nframes``, ``min_frames``, ``max_frames``, ``min_pixels``,
    ``max_pixels``, ``total_pixels``; :class:`vlrl.core.video.VideoSpec`). Empty: qwen-vl-utils'
    defaults (2 frames per second), the same frames ``vlrl caption --videos`` shows a model."""


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

    Only structure is checked here; call :func:`vlrl.training.validation.validate` for everything
    that needs the registry, the dataset's columns or TRL's config fields.
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
