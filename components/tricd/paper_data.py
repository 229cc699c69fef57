"""The paper profile's data: the OmniVCHall release read from a user root, its videos decoded
with PyAV (``components.common.video.read_video``) into the same ``{split}_videos.pt`` / ``{split}_qa.parquet`` files the procedural
benchmark writes, so every later stage runs unchanged.

Layout read (the official repository's ``dataset/MyBench`` plus its default video folder):

    <paper.data_root>/
        train/train_s_ynqa.json  train_m_ynqa.json  train_s_mcqa.json  train_m_mcqa.json
        val/val_*.json           (same four files)
        test/test_*.json         (same four files)
        all_video/<video_id>.mp4 (or .avi/.mov/.mkv; ``paper.video_dir`` points elsewhere)

A question file is a JSON list of records: ``{"s_ynqa_id": 1, "video_id": "11029",
"type_id": 4, "yn_question": ..., "yn_answer": "no"}`` for yes/no items (``m_ynqa_id`` for
compositional ones, whose ``type_id`` is a list), ``{"s_mcqa_id": ..., "mc_question": ...,
"mc_option": ["A. ...", "B. ...", "C. ..."], "mc_answer": "B"}`` for multiple choice.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SPLITS = ("train", "val", "test")
# our task names <- the release's file suffixes and id fields
TASK_FILES = {"s_yn": "s_ynqa", "c_yn": "m_ynqa", "s_mc": "s_mcqa", "c_mc": "m_mcqa"}
VIDEO_EXTENSIONS = (".mp4", ".avi", ".mov", ".mkv")
# type_id -> evidence type. The release does not name its ids; this mapping is read off the
# questions of the official train split (1: "is X doing Y", 2: "the scene is", 3: "there is",
# 4: physical contact / interaction, 5: colour / material, 6: "the event is", 7: "before /
# after", 8: "the camera ..."). Inferred, so it is a config value (``paper.type_names``).
TYPE_NAMES = {1: "action", 2: "scene", 3: "object", 4: "relation", 5: "attribute", 6: "event",
              7: "temporal", 8: "camera"}
NONE_PATTERNS = ("均不正确", "都不正确", "none of", "None of")
ALL_PATTERNS = ("均正确", "都正确", "all are correct", "All are correct", "All of")


def question_file(root: Path, split: str, task: str) -> Path:
    return Path(root) / split / f"{split}_{TASK_FILES[task]}.json"


def find_video(video_dir: Path, video_id: str) -> Path | None:
    for ext in VIDEO_EXTENSIONS:
        path = Path(video_dir) / f"{video_id}{ext}"
        if path.is_file():
            return path
    return None


def adversarial_option(options: list[str]) -> tuple[str, str]:
    """("none" | "all" | "", its letter) of an adversarial option ("none of the others are
    correct" / "all are correct"); in the release it can sit at any position."""
    for letter, text in zip("ABC", options):
        if any(p in text for p in NONE_PATTERNS):
            return "none", letter
        if any(p in text for p in ALL_PATTERNS):
            return "all", letter
    return "", ""


def read_questions(root: Path, split: str, type_names: dict[int, str] | None = None) -> list[dict]:
    """The four question files of a split as rows in the procedural benchmark's schema (plus
    ``video_id``); ``video`` (the row's index into the split's video tensor) is filled later."""
    names = {int(k): v for k, v in (type_names or TYPE_NAMES).items()}
    rows = []
    for task, stem in TASK_FILES.items():
        path = question_file(root, split, task)
        records = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(records, list):
            raise ValueError(f"{path}: expected a JSON list of question records")
        for rec in records:
            ids = rec["type_id"] if isinstance(rec["type_id"], list) else [rec["type_id"]]
            types = sorted({names.get(int(t), f"type_{t}") for t in ids})
            if task.endswith("yn"):
                question, options, answer = rec["yn_question"], [], str(rec["yn_answer"]).strip().lower()
                if answer not in ("yes", "no"):
                    raise ValueError(f"{path}: item {rec.get(stem + '_id')} has answer {answer!r} (yes/no)")
            else:
                question, options = rec["mc_question"], [str(o) for o in rec["mc_option"]]
                answer = str(rec["mc_answer"]).strip().upper()[:1]
                if answer not in ("A", "B", "C"):
                    raise ValueError(f"{path}: item {rec.get(stem + '_id')} has answer {answer!r} (A/B/C)")
            kind, letter = adversarial_option(options)
            rows.append({"task": task, "types": types, "question": question, "options": options,
                         "answer": answer, "adversarial": kind, "adversarial_letter": letter, "clauses": "",
                         "qa_id": f"{split}-{stem}-{rec[stem + '_id']}", "video_id": str(rec["video_id"]),
                         "split": split, "compositional": task.startswith("c_")})
    return rows


def build_paper_benchmark(cfg, ctx) -> None:
    """``build_benchmark`` for the paper profile: the release's train / val / test questions and
    their videos (``paper.num_frames`` frames of ``paper.frame_size`` px each). There is no
    ``pretrain`` split: the backbone is a pretrained video LLM."""
    import pandas as pd
    import torch

    from components.common.io import save_torch, write_json_atomic, write_table
    from components.common.video import read_video

    p = cfg.paper
    root = Path(p.data_root).expanduser()
    video_dir = Path(p.video_dir).expanduser() if p.video_dir else root / "all_video"
    limits = {"train": p.train_limit, "val": p.val_limit, "test": p.test_limit}
    summary: dict = {}
    for i, split in enumerate(SPLITS):
        rows = read_questions(root, split, p.type_names)
        if limits[split] >= 0:   # a stratified cut keeps every task: the first n of each, in order
            per = {t: [r for r in rows if r["task"] == t] for t in TASK_FILES}
            rows = [r for t in TASK_FILES for r in per[t][:max(1, limits[split] // len(TASK_FILES))]]
        video_ids = sorted({r["video_id"] for r in rows})
        missing = [v for v in video_ids if find_video(video_dir, v) is None]
        if missing:
            raise FileNotFoundError(f"{video_dir}: no video file for {len(missing)} {split} video ids "
                                    f"(e.g. {missing[:3]}; looked for <id>{'/'.join(VIDEO_EXTENSIONS)})")
        videos = np.empty((len(video_ids), p.num_frames, p.frame_size, p.frame_size, 3), np.uint8)
        for v, vid in enumerate(video_ids):     # num_frames at uniform positions, resized square
            videos[v] = read_video(find_video(video_dir, vid), n_frames=p.num_frames, size=p.frame_size)
            ctx.progress(v + 1, len(video_ids), f"decoded {split} video {vid}")
        index = {vid: k for k, vid in enumerate(video_ids)}
        for r in rows:
            r["video"] = index[r["video_id"]]
        save_torch(ctx.out_dir / f"{split}_videos.pt", torch.from_numpy(videos))
        write_json_atomic(ctx.out_dir / f"{split}_programs.json",
                          [{"video_id": vid} for vid in video_ids])
        df = pd.DataFrame(rows)
        write_table(ctx.out_dir / f"{split}_qa.parquet", df)
        yn = df[df.task.str.endswith("yn")]
        mc = df[~df.task.str.endswith("yn")]
        summary[f"{split}_n_qa"] = len(df)
        summary[f"{split}_n_videos"] = len(video_ids)
        summary[f"{split}_yes_rate"] = float((yn.answer == "yes").mean()) if len(yn) else float("nan")
        adv = mc[mc.adversarial != ""]
        summary[f"{split}_adv_answer_rate"] = (float((adv.answer == adv.adversarial_letter).mean())
                                               if len(adv) else float("nan"))
        ctx.progress(i + 1, len(SPLITS), f"read {split}: {len(df)} QA, {len(video_ids)} videos")
    ctx.write_metrics(summary)

