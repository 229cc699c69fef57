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
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

_NUMBER = r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?"
_METRIC = r"[A-Za-z0-9_.-]+/[^\s]+"
# ">= 1", "<= 0.75 * evaluate/ece_erm", ">= evaluate/acc_erm - 1.5": a number, or another
# metric scaled by a factor and/or shifted by an offset
_COMPARISON = re.compile(rf"^\s*(>=|<=|==|>|<)\s*(?:({_NUMBER})\s*\*\s*)?(?:({_METRIC})|({_NUMBER}))"
                         rf"(?:\s*([+-])\s*({_NUMBER}))?\s*$")
_OPERATORS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt}


class Criterion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    text: str
    metric: str = Field(pattern=r"^[A-Za-z0-9_.-]+/.+$", description="<stage>/<metric key>")
    passes_if: str
    measured: list[str] = []
    gated: bool = True
    # premise: a property of the setting that must hold for the method to be tested at all;
    # claim: the paper's claim; reported: a number shown beside the others, never a verdict
    kind: Literal["premise", "claim", "reported"] = "claim"
    requires: list[str] | None = None
    """Ids of the premises this claim rests on; by default every gated premise of the method."""

    @field_validator("passes_if")
    @classmethod
    def _comparison(cls, value: str) -> str:
        if not _COMPARISON.match(value):
            raise ValueError("expected an operator and a number or metric, e.g. '>= 1', "
                             f"'<= 0.75 * evaluate/ece_erm', '>= evaluate/acc_erm - 1.5'; got {value!r}")
        return value

    @property
    def reference(self) -> str | None:
        """The other metric the threshold is relative to, if any."""
        return _COMPARISON.match(self.passes_if).group(3)

    def threshold(self, reference_value: float | None = None) -> float | None:
        _, factor, metric, number, sign, offset = _COMPARISON.match(self.passes_if).groups()
        if metric is not None and reference_value is None:
            return None
        base = reference_value if metric is not None else float(number)
        value = float(factor or 1) * base
        return value + float(offset) if sign == "+" else value - float(offset) if sign == "-" else value

    def passes(self, value: float, reference_value: float | None = None) -> bool:
        op = _COMPARISON.match(self.passes_if).group(1)
        threshold = self.threshold(reference_value)
        if threshold is None:
            raise ValueError(f"{self.id}: needs the value of {self.reference}")
        if op == "==":
            return math.isclose(value, threshold, rel_tol=1e-9, abs_tol=1e-12)
        return _OPERATORS[op](value, threshold)


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
    small_wall_s: float | None = None
    """Measured wall time of ``repro run <method>`` (small profile), shown by ``repro run``."""

    @model_validator(mode="after")
    def _requires_names_premises(self) -> "Claims":
        premises = {c.id for c in self.criteria if c.kind == "premise"}
        for c in self.criteria:
            unknown = sorted(set(c.requires or ()) - premises)
            if unknown:
                raise ValueError(f"criterion {c.id}: requires {unknown}, which are not premise "
                                 f"criteria here (premises: {sorted(premises)})")
        return self


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
