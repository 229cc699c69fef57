"""Base class for a method's params: one pydantic model, three profiles.

The field defaults *are* the ``small`` profile (a faithful small experiment on 2 CPU cores).
``SMOKE`` and ``PAPER`` hold overrides that are deep-merged on top. Unknown keys and bad
values raise a ``pydantic.ValidationError`` that names the offending key.
"""
from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

PROFILES = ("smoke", "small", "paper")


class Section(BaseModel):
    """A group of params read by one or a few stages (one DVC params key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class MethodConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    seeds: list[int] = [0, 1, 2]

    SMOKE: ClassVar[dict[str, Any]] = {}
    PAPER: ClassVar[dict[str, Any]] = {}

    @classmethod
    def for_profile(cls, profile: str, overrides: dict[str, Any] | None = None) -> "MethodConfig":
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
        values: dict[str, Any] = {}
        deep_merge(values, {"smoke": cls.SMOKE, "small": {}, "paper": cls.PAPER}[profile])
        deep_merge(values, overrides or {})
        return cls.model_validate(values)

    def preflight(self) -> None:
        """Fail early, before anything runs, when something the profile needs is missing
        (e.g. the paper profile's data roots). Override per method."""


def deep_merge(into: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            deep_merge(into[key], value)
        elif isinstance(value, dict):
            into[key] = deep_merge({}, value)
        else:
            into[key] = value
    return into
