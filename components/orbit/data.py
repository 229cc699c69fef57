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


def read_healthbench_jsonl(path: str, split: str) -> list[dict]:
    """HealthBench rows {prompt, prompt_id, example_tags, rubrics} -> our columns."""
    import fsspec

    rows = []
    with fsspec.open(path, "rt") as f:
        for n, line in enumerate(f):
            if not line.strip():
                continue
            ex = json.loads(line)
            for key in ("prompt", "rubrics"):
                if key not in ex:
                    raise ValueError(f"{path}:{n + 1}: HealthBench row without {key!r}")
            rubrics = [{"criterion": r["criterion"], "points": int(r["points"]), "tags": list(r.get("tags", [])),
                        "predicate": ""} for r in ex["rubrics"]]
            rows.append({"prompt_id": str(ex.get("prompt_id", f"{split}-{n:05d}")), "split": split,
                         "prompt": json.dumps(ex["prompt"]), "example_tags": json.dumps(ex.get("example_tags", [])),
                         "rubrics": json.dumps(rubrics if split != "train" else []), "facts": "{}",
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
