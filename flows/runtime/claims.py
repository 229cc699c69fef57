"""What a method claims and how to check it: the YAML front matter of ``components/<m>/CLAIMS.md``.

The prose below the front matter is for people; the front matter is what ``repro report`` and
the README's method table read. The format is documented in CONTRIBUTING.md.
"""
from __future__ import annotations

import math
import operator
import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

_COMPARISON = re.compile(r"^\s*(>=|<=|==|>|<)\s*(-?[0-9.eE+-]+)\s*$")
_OPERATORS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}


class Criterion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    text: str
    metric: str = Field(pattern=r"^[A-Za-z0-9_.-]+/.+$", description="<stage>/<metric key>")
    passes_if: str
    measured: list[str] = []
    gated: bool = True

    @field_validator("passes_if")
    @classmethod
    def _comparison(cls, value: str) -> str:
        if not _COMPARISON.match(value):
            raise ValueError(f"expected an operator and a number, e.g. '>= 1', got {value!r}")
        return value

    def passes(self, value: float) -> bool:
        op, threshold = _COMPARISON.match(self.passes_if).groups()
        if op == "==":
            return math.isclose(value, float(threshold), rel_tol=1e-9, abs_tol=1e-12)
        return _OPERATORS[op](value, float(threshold))


class Plot(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str
    kind: Literal["curve", "bar"]
    stage: str | None = None       # curve: the stage whose runs logged the curve
    metric: str | None = None      # curve: the logged key
    metrics: list[str] = []        # bar: <stage>/<key> summary metrics side by side


class Claims(BaseModel):
    model_config = ConfigDict(extra="forbid")

    method: str
    paper: str
    claim: str
    headline: str
    seeds: list[int] = []
    criteria: list[Criterion]
    plots: list[Plot] = []


class ClaimsError(ValueError):
    pass


def claims_file(root: Path, method: str) -> Path:
    return root / "components" / method / "CLAIMS.md"


def split_front_matter(text: str) -> tuple[str | None, str]:
    """(yaml text, the rest) for a document starting with a ``---`` fenced block."""
    match = re.match(r"^---\s*\n(.*?)\n---\s*\n", text, flags=re.S)
    if not match:
        return None, text
    return match.group(1), text[match.end():]


def load_claims(root: Path, method: str) -> Claims | None:
    """The method's claims, or None when its CLAIMS.md has no front matter yet."""
    path = claims_file(root, method)
    if not path.is_file():
        return None
    front, _ = split_front_matter(path.read_text())
    if front is None:
        return None
    try:
        claims = Claims.model_validate(yaml.safe_load(front))
    except (ValidationError, yaml.YAMLError) as err:
        raise ClaimsError(f"{path}: invalid front matter:\n{err}") from None
    if claims.method != method:
        raise ClaimsError(f"{path}: front matter says method {claims.method!r}, expected {method!r}")
    return claims
