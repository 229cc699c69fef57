"""How a method declares its pipeline: once, in ``flows/<method>.py``.

Everything else is derived from these declarations: the DVC pipeline file
(``data/<method>/dvc.yaml``), the params file, the Prefect tasks and the MLflow runs.

Stage functions are named as ``"module:function"`` strings and imported only when a stage
actually runs, so that checking a pipeline that is up to date never pays for torch.
"""
from __future__ import annotations

import importlib
import itertools
import re
from dataclasses import dataclass, field
from typing import Any, Callable

_KEY_RE = re.compile(r"^[A-Za-z0-9_-]+$")  # "." would break DVC params lookups


@dataclass(frozen=True)
class Resources:
    """What one instance of the stage needs; Ray places it accordingly."""

    num_cpus: float = 1
    num_gpus: float | dict[str, float] = 0
    """GPUs per instance; a mapping declares them per profile, e.g. ``{"paper": 1}`` (none in
    smoke/small, so a CPU machine never waits for a GPU it does not have)."""
    custom: dict[str, float] = field(default_factory=dict)
    """Ray custom resources, e.g. ``{"highmem": 1}``: only nodes started with
    ``ray start --resources '{"highmem": 4}'`` take the stage."""

    def gpus(self, profile: str) -> float:
        if isinstance(self.num_gpus, dict):
            return float(self.num_gpus.get(profile, 0))
        return float(self.num_gpus)


@dataclass(frozen=True)
class Stage:
    name: str
    func: str
    """``"components.<method>.<module>:<function>"``, called as ``function(cfg, ctx)``."""
    params: tuple[str, ...] = ()
    """Top-level config keys the stage reads; reading any other key raises."""
    deps: tuple[str, ...] = ()
    """Upstream stages whose outputs this stage reads (``ctx.inputs[name]``)."""
    fan_out: dict[str, str] = field(default_factory=dict)
    """``{item_name: "dotted.config.path"}``: one stage instance per combination of the listed
    config lists, e.g. ``{"variant": "rl.variants", "seed": "seeds"}``. Instances run in parallel."""
    item_deps: tuple[str, ...] = ()
    """Fan-out deps of which each instance reads only the item with its own key
    (``ctx.inputs[name]`` is that item's folder): DVC tracks that item alone, so adding a
    seed runs only the new items all the way down. Both stages fan out over the same axes."""
    metrics: bool = True
    resources: Resources = Resources()
    retries: int = 0
    description: str = ""

    def load(self) -> Callable[[Any, Any], Any]:
        module, _, func = self.func.partition(":")
        return getattr(importlib.import_module(module), func)

    def fan_out_items(self, config: Any) -> dict[str, dict[str, Any]]:
        """``{item_key: {item_name: value}}`` for the current config, e.g.
        ``{"alf-0": {"variant": "alf", "seed": 0}}``. Empty for a plain stage."""
        if not self.fan_out:
            return {}
        names = list(self.fan_out)
        axes = [list(lookup(config, path)) for path in self.fan_out.values()]
        items = {}
        for combo in itertools.product(*axes):
            key = "-".join(str(v) for v in combo)
            if not _KEY_RE.match(key):
                raise ValueError(f"stage {self.name}: fan-out value {key!r} must match {_KEY_RE.pattern}")
            items[key] = dict(zip(names, combo))
        return items


@dataclass(frozen=True)
class Method:
    name: str
    title: str
    config: str
    """``"components.<method>.config:<ConfigClass>"`` (a ``MethodConfig`` subclass)."""
    stages: tuple[Stage, ...]
    paper: str = ""
    code: tuple[str, ...] | None = None
    """Code paths (from the project root) whose change makes every stage stale; by default
    ``components/<name>``, ``components/common`` and ``flows/<name>.py``."""

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for stage in self.stages:
            if stage.name in seen:
                raise ValueError(f"{self.name}: duplicate stage {stage.name}")
            missing = [d for d in stage.deps if d not in seen]
            if missing:
                raise ValueError(f"{self.name}.{stage.name}: deps {missing} must be declared before it")
            for dep in stage.item_deps:
                if dep not in stage.deps or self.stage(dep).fan_out != stage.fan_out or not stage.fan_out:
                    raise ValueError(f"{self.name}.{stage.name}: item_deps {dep!r} must be one of its deps "
                                     "and fan out over the same axes as it does")
            seen.add(stage.name)

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(f"{self.name} has no stage {name!r}; stages: {', '.join(s.name for s in self.stages)}")

    def config_class(self) -> type:
        module, _, cls = self.config.partition(":")
        return getattr(importlib.import_module(module), cls)

    @property
    def code_paths(self) -> tuple[str, ...]:
        """Code whose change makes every stage of the method stale (DVC deps), by folder."""
        if self.code is not None:
            return self.code
        return (f"components/{self.name}", "components/common", f"flows/{self.name}.py")

    def all_code_paths(self) -> tuple[str, ...]:
        """Every code path any stage depends on, either way of counting (to copy a project)."""
        by_imports = {p for s in self.stages for p in self.stage_code_paths(s, by_imports=True)}
        return tuple(sorted(set(self.code_paths) | by_imports))

    def stage_code_paths(self, stage: Stage, by_imports: bool = False) -> tuple[str, ...]:
        """Code whose change makes this stage stale (DVC deps). ``by_imports``: the
        ``components/`` files its function and the method's config import (transitively),
        non-Python files of the method's package (data a stage may read; not its Markdown),
        and ``flows/<name>.py``; otherwise ``code_paths``. ``code`` given in the declaration
        replaces either (throw-away test methods)."""
        if self.code is not None or not by_imports:
            return self.code_paths
        from flows.runtime.codedeps import component_files, package_data_files

        modules = (stage.func.partition(":")[0], self.config.partition(":")[0])
        files = {f for module in modules for f in component_files(module)}
        files |= set(package_data_files(f"components/{self.name}"))
        return (*sorted(files), f"flows/{self.name}.py")

    def descendants(self, names: set[str]) -> set[str]:
        out = set(names)
        for stage in self.stages:  # declaration order is topological
            if any(d in out for d in stage.deps):
                out.add(stage.name)
        return out


def lookup(config: Any, dotted: str) -> Any:
    value = config
    for part in dotted.split("."):
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    return value


class DeclaredParams:
    """A read-only view of the config that only exposes the keys a stage declared, so a stage
    cannot silently depend on a param that DVC does not track for it."""

    def __init__(self, config: Any, keys: tuple[str, ...], stage: str):
        self._config, self._keys, self._stage = config, set(keys), stage

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        if key not in self._keys:
            raise AttributeError(
                f"stage {self._stage!r} reads param {key!r} but does not declare it in params=(...)"
            )
        return getattr(self._config, key)
