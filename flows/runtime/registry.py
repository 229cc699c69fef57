"""Every ``flows/<method>.py`` that defines ``METHOD`` is a registered method.

Tests add throw-away methods with ``REPRO_EXTRA_FLOWS=module.a,module.b`` (each module
defines ``METHOD``); the variable is inherited by ``dvc repro`` subprocesses.
"""
from __future__ import annotations

import importlib
import os
import pkgutil

import flows
from flows.runtime.dag import Method

_NOT_METHODS = {"cli", "runtime"}


def _extra_modules() -> dict[str, str]:
    modules = [m for m in os.environ.get("REPRO_EXTRA_FLOWS", "").split(",") if m]
    return {m.rsplit(".", 1)[-1]: m for m in modules}


def method_names() -> list[str]:
    names = {
        info.name for info in pkgutil.iter_modules(flows.__path__)
        if info.name not in _NOT_METHODS and not info.name.startswith("_")
    }
    return sorted(names | set(_extra_modules()))


def get(name: str) -> Method:
    module = _extra_modules().get(name, f"flows.{name}")
    if name not in method_names():
        raise SystemExit(f"unknown method {name!r}; known: {', '.join(method_names())}")
    method = importlib.import_module(module).METHOD
    assert method.name == name, f"{module} declares METHOD.name={method.name!r}, expected {name!r}"
    return method


def all_methods() -> list[Method]:
    return [get(name) for name in method_names()]
