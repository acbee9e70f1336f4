"""Reward registry: rewards are chosen by name, built from their own settings block.

    @register_reward("caprl_qa")
    class CapRLQAReward(Reward): ...

    reward = build_reward("caprl_qa", answerer="hf:/models/answerer", mode="exact")
    reward = build_reward("my_pkg.rewards:length_penalty")   # any user function or class

A registered object is a factory (a class or function) called with the settings as keyword
arguments. Names that contain ``:`` are imported as ``module:attribute``; a plain function found
that way is wrapped so it reports through the same interface as vlrl's own rewards.

Built-in rewards are found, not listed: every module of this package (guards, reference overlap,
the holistic judge, ...) and every method package ``vlrl/methods/<name>/`` that has a ``reward.py``
registers its rewards when it is imported, so adding a reward module or a method needs no edit here. The methods are looked up by package name at first use (a plug-in
lookup, like an entry point), never imported by this module: rewards sit *below* the methods in
the import order, and ``vlrl --help`` stays fast.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
from collections.abc import Callable
from typing import Any

from vlrl.rewards.base import FunctionReward, Reward, Score, completion_text

_REGISTRY: dict[str, Callable[..., Any]] = {}

METHODS_PACKAGE = "vlrl.methods"


def register_reward(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def deco(factory: Callable[..., Any]) -> Callable[..., Any]:
        if name in _REGISTRY and _REGISTRY[name] is not factory:
            raise ValueError(f"reward {name!r} is already registered")
        _REGISTRY[name] = factory
        return factory

    return deco


def builtin_reward_modules() -> list[str]:
    """vlrl's method-independent rewards (guards, reference overlap, holistic judge) plus
    ``vlrl.methods.<m>.reward`` for every method that has one."""
    # every module of this package, and every sub-package (the guards are one)
    modules = [f"{__name__}.{info.name}" for info in pkgutil.iter_modules(__path__)]
    spec = importlib.util.find_spec(METHODS_PACKAGE)
    for info in pkgutil.iter_modules(spec.submodule_search_locations if spec else []):
        if info.ispkg and importlib.util.find_spec(f"{METHODS_PACKAGE}.{info.name}.reward") is not None:
            modules.append(f"{METHODS_PACKAGE}.{info.name}.reward")
    return modules


_loaded = False


def _load_builtins() -> None:
    global _loaded
    if not _loaded:
        for mod in builtin_reward_modules():
            importlib.import_module(mod)
        _loaded = True


def available_rewards() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def describe_rewards() -> list[dict[str, Any]]:
    """``{"name", "module", "required_columns"}`` for every registered reward (``vlrl reward list``)."""
    _load_builtins()
    return [
        {
            "name": name,
            "module": getattr(factory, "__module__", "?"),
            "required_columns": list(getattr(factory, "required_columns", ()) or ()),
        }
        for name, factory in sorted(_REGISTRY.items())
    ]


def get_reward_factory(name: str) -> Callable[..., Any]:
    """The factory registered under ``name``, or the object at ``module:attr``. Raises with a fix."""
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"reward {name!r}: cannot import {attr!r} from {module!r} ({e})") from e
    _load_builtins()
    if name not in _REGISTRY:
        raise ValueError(f"unknown reward {name!r}; registered: {', '.join(sorted(_REGISTRY))} (or use 'module:function')")
    return _REGISTRY[name]


def build_reward(name: str, **settings: Any) -> Reward:
    """Build a :class:`Reward` by name (registry or dotted path) from its settings block.

    A ``guards`` key in the settings (a dict of :func:`vlrl.rewards.guards.with_guards` settings;
    ``true`` or ``{}`` for the defaults; ``false``/``null`` for none) wraps the reward in
    reward-hacking guards.
    """
    guards = settings.pop("guards", None)
    reward = _build_unguarded(name, **settings)
    if guards is not None and guards is not False:
        from vlrl.rewards.guards import with_guards

        reward = with_guards(reward, **(guards if isinstance(guards, dict) else {}))
    return reward


def _build_unguarded(name: str, **settings: Any) -> Reward:
    factory = get_reward_factory(name)
    if inspect.isclass(factory) and issubclass(factory, Reward):
        return factory(**settings)
    if ":" in name and not inspect.isclass(factory):
        # A user reward function in TRL's contract: settings become extra keyword arguments.
        return FunctionReward(factory, name=getattr(factory, "__name__", name.rsplit(":", 1)[-1]), **settings)
    obj = factory(**settings)
    return obj if isinstance(obj, Reward) else FunctionReward(obj, name=name)


__all__ = [
    "FunctionReward",
    "Reward",
    "Score",
    "available_rewards",
    "build_reward",
    "completion_text",
    "describe_rewards",
    "get_reward_factory",
    "register_reward",
]
