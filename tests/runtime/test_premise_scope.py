"""A claim may name the premises it rests on (``requires``); a failed premise then makes only
those claims inconclusive, and the others are judged on their numbers."""
from __future__ import annotations

import pytest

from flows.runtime.claims import Claims
from flows.runtime.results import INCONCLUSIVE, NOT_REPRODUCED, PREMISE_MET, PREMISE_NOT_MET, REPRODUCED, judge, overall


def claims(requires_c1, requires_c2=None) -> Claims:
    def crit(cid, metric, passes_if, **extra):
        return {"id": cid, "text": cid, "metric": metric, "passes_if": passes_if, **extra}

    return Claims(method="toy", paper="p", claim="c", headline="h", criteria=[
        crit("P1", "eval/p1", ">= 1", kind="premise"),
        crit("P2", "eval/p2", ">= 1", kind="premise"),
        crit("C1", "eval/c1", ">= 1", requires=requires_c1),
        crit("C2", "eval/c2", ">= 1", requires=requires_c2),
    ])


VALUES = {("eval", None): {"p1": 0.0, "p2": 2.0, "c1": 2.0, "c2": 0.0}}  # P1 fails, P2 holds


def test_a_claim_resting_on_a_met_premise_is_judged():
    p1, p2, c1, c2 = judge(claims(requires_c1=["P1"], requires_c2=["P2"]), VALUES)
    assert (p1.status, p2.status) == (PREMISE_NOT_MET, PREMISE_MET)
    assert c1.status == INCONCLUSIVE           # it would read "reproduced" on its number
    assert c2.status == NOT_REPRODUCED         # P2 held: a real test, and it failed
    assert overall([p1, p2, c1, c2]) == f"0/1 {REPRODUCED}, 1 inconclusive (premise not met: P1)"


def test_by_default_every_premise_gates_every_claim():
    verdicts = judge(claims(requires_c1=None), VALUES)
    assert [v.status for v in verdicts[2:]] == [INCONCLUSIVE, INCONCLUSIVE]
    assert overall(verdicts) == "inconclusive (premise not met: P1)"


def test_requires_must_name_premises():
    with pytest.raises(ValueError, match="C1: requires \\['C2'\\]"):
        claims(requires_c1=["C2"])
