"""Stage build_cases: HealthBench-format rows (prompt, example_tags, rubrics) in parquet.

Synthetic (embedded): three disjoint splits from the ontology — ``train`` (RL prompts, no
rubric: rubrics are generated later), ``val`` (validation cases with reference rubrics, used
only for the premise checks), ``test`` (held-out, physician-style reference rubrics) and
``seed_pool`` (the retrieval pool with reference rubrics, the analogue of HealthBench without
its Hard subset). Paper: the same columns read from user-supplied HealthBench JSONL files.
"""
from __future__ import annotations

import json
from collections import Counter

from components.common.io import write_table
from components.common.readers import DatasetError
from components.orbit.ontology import build_case_rows, prompt_text, reference_rubric

COLUMNS = ("prompt_id", "split", "prompt", "example_tags", "rubrics", "facts", "visible_facts", "condition")


def synthetic_rows(c) -> list[dict]:
    probs = {k: getattr(c, k) for k in ("p_red_flag", "p_missing_duration", "p_pregnant", "p_clinician",
                                        "p_low_resource", "p_truncate_first")}
    rows = (build_case_rows(c.n_train, c.seed, "train", probs)
            + build_case_rows(c.n_test, c.seed + 1, "test", probs)
            + build_case_rows(c.n_seed_pool, c.seed + 2, "seed_pool", probs)
            + build_case_rows(c.n_val, c.seed + 3, "val", probs))
    for r in rows:
        r["rubrics"] = "[]" if r["split"] == "train" else json.dumps(reference_rubric(json.loads(r["visible_facts"])))
    # held-out and training prompts must not be in the retrieval pool (paper: Hard excluded)
    taken = {prompt_text(json.loads(r["prompt"])) for r in rows if r["split"] != "seed_pool"}
    return [r for r in rows if r["split"] != "seed_pool" or prompt_text(json.loads(r["prompt"])) not in taken]


def _check_message(m, where: str) -> None:
    if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
        raise DatasetError(f"{where}: each prompt message must be an object with string 'role' and 'content'")


def _check_rubric_item(r, where: str) -> dict:
    if not isinstance(r, dict):
        raise DatasetError(f"{where}: must be an object with criterion, points, tags")
    if not isinstance(r.get("criterion"), str) or not r["criterion"].strip():
        raise DatasetError(f"{where}: field 'criterion' must be a non-empty string")
    pts = r.get("points")
    if isinstance(pts, bool) or not isinstance(pts, (int, float)) or int(pts) != pts:
        raise DatasetError(f"{where}: field 'points' must be an integer, got {pts!r}")
    tags = r.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise DatasetError(f"{where}: field 'tags' must be a list of strings")
    # free text: no predicate, so the judge (not the rule checker) grades it
    return {"criterion": r["criterion"], "points": int(pts), "tags": list(tags), "predicate": ""}


def healthbench_records(path: str, need_rubrics: bool = True) -> list[dict]:
    """Validated HealthBench rows (simple-evals layout: ``prompt`` messages, ``rubrics`` of
    {criterion, points, tags}, optional ``prompt_id`` / ``example_tags``); a problem raises
    ``DatasetError`` naming the file, the line and the field."""
    from components.common.readers import iter_jsonl

    schema = {"prompt": list, **({"rubrics": list} if need_rubrics else {})}
    out = []
    for n, ex in enumerate(iter_jsonl(path, schema), 1):
        where = f"{path}: row {n}"
        if not ex["prompt"]:
            raise DatasetError(f"{where}: field 'prompt' is empty")
        for j, m in enumerate(ex["prompt"]):
            _check_message(m, f"{where}: prompt[{j}]")
        items = [_check_rubric_item(r, f"{where}: rubrics[{j}]") for j, r in enumerate(ex.get("rubrics") or [])]
        if need_rubrics and not any(it["points"] > 0 for it in items):
            raise DatasetError(f"{where}: field 'rubrics' has no item with positive points")
        tags = ex.get("example_tags", [])
        if not isinstance(tags, list):
            raise DatasetError(f"{where}: field 'example_tags' must be a list of strings")
        out.append({"prompt": ex["prompt"], "prompt_id": ex.get("prompt_id"), "example_tags": tags, "rubrics": items})
    if not out:
        raise DatasetError(f"{path}: no rows")
    return out


def validate_healthbench_file(path: str, need_rubrics: bool = True) -> str | None:
    """None if the file reads as HealthBench rows, else the problem (for preflight)."""
    try:
        healthbench_records(path, need_rubrics)
    except DatasetError as err:
        return str(err)
    return None


def read_healthbench_jsonl(path: str, split: str) -> list[dict]:
    """HealthBench rows -> our columns. Training rows keep no rubric (rubrics are generated)."""
    rows = []
    for n, ex in enumerate(healthbench_records(path, need_rubrics=split != "train")):
        rows.append({"prompt_id": str(ex["prompt_id"] or f"{split}-{n:05d}"), "split": split,
                     "prompt": json.dumps(ex["prompt"]), "example_tags": json.dumps(ex["example_tags"]),
                     "rubrics": json.dumps(ex["rubrics"] if split != "train" else []), "facts": "{}",
                     "visible_facts": "{}", "condition": ""})
    return rows


def build_cases_stage(cfg, ctx) -> None:
    c = cfg.cases
    if c.source == "synthetic":
        rows = synthetic_rows(c)
    else:
        p = cfg.paper
        rows = (read_healthbench_jsonl(p.train_jsonl, "train") + read_healthbench_jsonl(p.eval_jsonl, "test")
                + read_healthbench_jsonl(p.seed_jsonl, "seed_pool"))
        eval_ids = {r["prompt_id"] for r in rows if r["split"] == "test"}
        rows = [r for r in rows if r["split"] != "seed_pool" or r["prompt_id"] not in eval_ids]
    write_table(ctx.out_dir / "cases.parquet", {k: [r[k] for r in rows] for k in COLUMNS})
    n = Counter(r["split"] for r in rows)
    themes = Counter(t for r in rows if r["split"] == "test" for t in json.loads(r["example_tags"])
                     if t.startswith("theme:"))
    ctx.write_metrics({"n_train": n["train"], "n_val": n["val"], "n_test": n["test"], "n_seed_pool": n["seed_pool"],
                       **{f"test_{k.replace(':', '_')}": v for k, v in sorted(themes.items())}})
