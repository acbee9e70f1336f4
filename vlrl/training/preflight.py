"""Pre-flight probes: everything a run will need from the outside world, checked before the policy loads.

:func:`vlrl.training.validation.validate` checks what a recipe *says*; this module checks that the world
can *give* it: a reward backend that does not answer, or an integration that is not installed, would
otherwise surface after a 7B policy has loaded (``wandb`` missing) or, worse, never (a dead
``answerer`` makes every reward ``None``, every advantage 0, and the run "succeeds" having learnt
nothing). Probes are cheap and bounded:

* a ``remote`` reward's service answers ``GET /ready`` with 200 (:mod:`vlrl.rewards.remote`);
* backends, through the one probe every job uses (:mod:`vlrl.core.backends.probe`): an ``hf:PATH``
  folder exists and its ``config.json`` loads (no weights are read); an ``openai:URL@MODEL``
  server's ``GET URL/models`` answers within a few seconds and lists MODEL;
* packages: each ``report_to`` integration, vLLM for ``use_vllm``, DeepSpeed for a ``deepspeed``
  config (or an accelerate launch with DeepSpeed), flash-attn for ``attn_implementation:
  flash_attention_*``, PEFT for ``model.lora``;
* lengths: the longest completion cap must fit the policy's context (``max_position_embeddings``)
  when the policy's config can be read locally;
* the TRL config itself, built as training builds it (:mod:`vlrl.training.config_check`): values
  TRL accepts when the config is built but fails on at start (``loss_type``, an optimizer whose
  package is missing, ``attn_implementation``) or silently misreads (``gradient_checkpointing:
  maybe``, ``epsilon_high < epsilon``).

Every problem is one line saying what is wrong and what to do; :func:`preflight` returns them all.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

from vlrl.core.backends.probe import PROBE_TIMEOUT_S
from vlrl.core.backends.probe import probe_backend as probe

logger = logging.getLogger(__name__)

# report_to name → (import name, pip name)
INTEGRATIONS = {
    "wandb": ("wandb", "wandb"),
    "tensorboard": ("tensorboard", "tensorboard"),
    "mlflow": ("mlflow", "mlflow"),
    "comet_ml": ("comet_ml", "comet-ml"),
    "clearml": ("clearml", "clearml"),
    "trackio": ("trackio", "trackio"),
    "swanlab": ("swanlab", "swanlab"),
    "neptune": ("neptune", "neptune"),
    "dvclive": ("dvclive", "dvclive"),
}
FLASH_ATTN = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


def has_package(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def backend_specs(obj: Any, where: str = "") -> list[tuple[str, str]]:
    """Every ``hf:``/``openai:`` spec string inside a nested settings block, with where it sits."""
    out: list[tuple[str, str]] = []
    if isinstance(obj, str):
        if obj.startswith(("hf:", "openai:")):
            out.append((where, obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out += backend_specs(v, f"{where}.{k}" if where else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += backend_specs(v, f"{where}[{i}]")
    return out


def probe_backend(spec: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the backend can serve, else one redacted line saying why not and what to do.

    The probe itself is :func:`vlrl.core.backends.probe.probe_backend`, shared with every long job,
    so a reward backend that ``vlrl caption`` accepts is accepted here too; this keeps the
    list-of-problems shape :func:`preflight` collects.
    """
    return probe(spec, timeout).problem


def _report_to(trainer: dict[str, Any]) -> list[str]:
    rt = trainer.get("report_to", "none")
    names = [rt] if isinstance(rt, str) else list(rt or [])
    return [n for n in names if n not in ("none", "all", None)]


def package_problems(recipe) -> list[str]:
    """Packages the recipe needs that are not importable, one line each with the install command."""
    t = recipe.trainer
    need: list[tuple[str, str, str]] = []  # (import name, pip name, why)
    for name in _report_to(t):
        imp, pip = INTEGRATIONS.get(name, (name, name))
        need.append((imp, pip, f"trainer.report_to lists {name!r}"))
    if t.get("use_vllm"):
        need.append(("vllm", "vllm", "trainer.use_vllm is true"))
    if t.get("deepspeed") or os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        need.append(("deepspeed", "deepspeed", "a DeepSpeed config is in use"))
    attn = recipe.model.attn_implementation
    if attn in FLASH_ATTN:
        need.append((FLASH_ATTN[attn], "flash-attn", f"model.attn_implementation is {attn!r}"))
    if recipe.model.lora is not None:
        need.append(("peft", "peft", "model.lora is set"))
    out = []
    for imp, pip, why in need:
        if not has_package(imp):
            alt = " or remove it from report_to" if "report_to" in why else ""
            out.append(f"{why} but {pip} is not installed; pip install {pip}{alt}")
    return out


def length_problems(recipe) -> list[str]:
    """Completion caps beyond the policy's context window (only when its config is readable locally)."""
    from vlrl.training.validation import stages_of

    path = recipe.model.path
    if not path or path.startswith("tiny:") or not Path(path).expanduser().is_dir():
        return []
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(str(Path(path).expanduser()))
    except Exception:  # noqa: BLE001 - an unreadable config is reported by the loader itself
        return []
    text = getattr(cfg, "text_config", None) or cfg
    limit = getattr(text, "max_position_embeddings", None)
    if not isinstance(limit, int):
        return []
    caps = [s.max_completion_length for s in stages_of(recipe)] if recipe.method == "ptst" else [
        recipe.trainer.get("max_completion_length")]
    out = []
    for cap in caps:
        if isinstance(cap, int) and cap >= limit:
            out.append(f"max_completion_length {cap} does not fit the policy's context ({limit} positions, "
                       f"prompt included); lower it below {limit}")
    return out


def preflight(recipe, *, backends: bool = True) -> list[str]:
    """All pre-flight problems of a (validated) recipe; an empty list means the run can start."""
    from vlrl.training.config_check import config_problems

    where = recipe.source or "recipe"
    problems = [f"{where}: {p}" for p in config_problems(recipe)]
    problems += [f"{where}: {p}" for p in package_problems(recipe)]
    problems += [f"{where}: {p}" for p in length_problems(recipe)]
    if backends:
        seen: set[str] = set()
        for i, r in enumerate(recipe.rewards):
            for key, spec in backend_specs(r.settings):
                if spec in seen:
                    continue
                seen.add(spec)
                if (why := probe_backend(spec)) is not None:
                    problems.append(f"{where}: rewards[{i}] ({r.name}) settings.{key}: {why}")
            if r.name == "remote" and (why := remote_problem(r.settings)) is not None:
                problems.append(f"{where}: rewards[{i}] (remote) settings.url: {why}")
    return problems


def remote_problem(settings: dict[str, Any]) -> str | None:
    """A ``remote`` reward's service must be ready (``GET /ready`` 200) before the policy loads."""
    from vlrl.rewards.remote import RemoteReward

    try:
        return RemoteReward(**settings).probe()
    except (TypeError, ValueError) as e:
        return str(e)


def check(recipe, *, backends: bool = True) -> None:
    """Raise :class:`~vlrl.training.recipe.RecipeError` listing every pre-flight problem."""
    from vlrl.training.recipe import RecipeError

    problems = preflight(recipe, backends=backends)
    if problems:
        raise RecipeError("recipe cannot run here:\n  - " + "\n  - ".join(problems))
