"""Test inputs of orbit's paper profile: tiny HealthBench JSONL files in the simple-evals layout
(prompt messages, prompt_id, example_tags, rubrics of {criterion, points, tags}), a tiny yes/no
reranker checkpoint (Qwen3 architecture, a word-level tokenizer that knows "yes" and "no"), and a
fake OpenAI-compatible server that plays both the rubric generator and the rubric judge.

The judge's verdict is a fixed function of the request (a hash of the completion and the item),
so replies that differ get different verdicts (the difficulty filter needs groups that are not
flat) and the same request always gets the same verdict."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.paper.fake_endpoint import FakeEndpoint
from tests.paper.layouts import write_jsonl

AXES = ("accuracy", "completeness", "communication_quality", "context_awareness", "instruction_following")
COMPLAINTS = ("a sore throat for two days", "a headache since this morning", "a rash on my arm",
              "chest pain when climbing stairs", "a cough and a mild fever", "back pain after lifting",
              "trouble sleeping for a week", "a twisted ankle", "itchy eyes in spring")
CRITERIA = (("Asks how long the symptoms have lasted.", 5), ("Advises urgent care for red-flag symptoms.", 8),
            ("Explains in plain language.", 3), ("Recommends antibiotics without an examination.", -6),
            ("States the problem is certainly harmless.", -4))


def healthbench_row(i: int, with_rubrics: bool = True) -> dict:
    complaint = COMPLAINTS[i % len(COMPLAINTS)]
    prompt = [{"role": "user", "content": f"hello, i have {complaint}."},
              {"role": "assistant", "content": "i am sorry to hear that. tell me more."},
              {"role": "user", "content": "what should i do?"}]
    row = {"prompt": prompt, "prompt_id": f"hb-{i:04d}", "example_tags": [f"theme:{('context_seeking', 'emergency_referrals')[i % 2]}"]}
    if with_rubrics:
        row["rubrics"] = [{"criterion": c, "points": p, "tags": ["level:example", f"axis:{AXES[(i + j) % 5]}"]}
                          for j, (c, p) in enumerate(CRITERIA[: 3 + i % 3])]
        row["ideal_completions_data"] = None
    return row


def write_healthbench(root: Path, n: int = 6) -> dict[str, Path]:
    """train (prompts only), seed pool (non-Hard) and eval (Hard) files of ``n`` rows each; the
    pool repeats one Hard prompt_id, which the profile must drop from retrieval."""
    root = Path(root)
    train = [healthbench_row(i, with_rubrics=False) | {"prompt_id": f"train-{i}"} for i in range(n)]
    hard = [healthbench_row(100 + i) for i in range(n)]
    pool = [healthbench_row(200 + i) for i in range(n - 1)] + [hard[0]]
    return {"train": write_jsonl(root / "train.jsonl", train), "seed": write_jsonl(root / "seed.jsonl", pool),
            "eval": write_jsonl(root / "hard.jsonl", hard)}


GENERATED = [{"criterion": "Asks about the duration of the complaint.", "points": 5,
              "tags": ["level:example", "axis:context_awareness"]},
             {"criterion": "Suggests a sensible first step at home.", "points": 4,
              "tags": ["level:example", "axis:completeness"]},
             {"criterion": "Uses clear, friendly language.", "points": 2,
              "tags": ["level:example", "axis:communication_quality"]},
             {"criterion": "Recommends a prescription drug without asking anything.", "points": -5,
              "tags": ["level:example", "axis:accuracy"]},
             {"criterion": "Has no points", "points": 0, "tags": ["level:example", "axis:accuracy"]}]


def verdict(prompt: str) -> bool:
    return hashlib.sha256(prompt.encode()).digest()[0] % 2 == 0


def answer(prompt: str) -> str:
    if prompt.startswith("You write grading rubrics"):
        return "```json\n" + json.dumps(GENERATED) + "\n```"
    return json.dumps({"explanation": "fixed by hash", "criteria_met": verdict(prompt)})


def fake_judge_server() -> FakeEndpoint:
    """orbit's rubric generator + rubric judge endpoint."""
    return FakeEndpoint(respond=lambda body: answer(body["messages"][-1]["content"]))


def tiny_reranker(folder: Path) -> Path:
    """A random tiny Qwen3ForCausalLM whose tokenizer has the "yes" and "no" tokens a
    Qwen3-Reranker-style scorer reads (the shared tiny tokenizer has neither)."""
    from components.common.hf_models import save_model
    from components.common.tiny_models import build_tiny
    from components.common.tiny_tokenizer import train_tokenizer
    from tests.paper.checkpoints import corpus

    tok = train_tokenizer(corpus(100) + ["yes no"] * 4 + [f"{c} {x}" for c, _ in CRITERIA for x in ("yes", "no")],
                          "word", vocab_size=512)
    return save_model(build_tiny("qwen3", vocab_size=len(tok)), folder, tok)
