"""CLAIMS.md: the prose names the criteria with the same IDs as the front matter."""
import re
from pathlib import Path

import yaml

CLAIMS = Path(__file__).resolve().parents[2] / "components" / "vig" / "CLAIMS.md"


def _front_matter_and_prose() -> tuple[dict, str]:
    _, front, prose = CLAIMS.read_text().split("---\n", 2)
    return yaml.safe_load(front), prose


def test_prose_uses_the_front_matter_ids():
    # the earlier file had A1/A2 in the front matter but "a1"/"a2" (swapped) in the prose
    front, prose = _front_matter_and_prose()
    ids = [c["id"] for c in front["criteria"]]
    criteria_section = prose.split("## Pass criteria", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"^- \*\*([A-Z]+\d+[a-z]?)\*\*", criteria_section, flags=re.M)
    assert named == ids
    assert not re.search(r"\b[a-c]\d:", prose)                     # no lower-case ids left


def test_premises_are_marked_and_point_at_validation_metrics():
    front, _ = _front_matter_and_prose()
    premises = [c for c in front["criteria"] if c.get("kind") == "premise"]
    assert premises and all("val" in c["metric"] for c in premises)
