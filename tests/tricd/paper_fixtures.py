"""A tiny random Qwen2-VL (config-built) with tokenizer, a tiny DINOv2 for the visual saliency,
and a tiny OmniVCHall release in its published layout: two generated mp4 videos and the four
question files of every split (one question each: S-YN, C-YN, S-MC, C-MC)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

FRAME = 16          # pixels; the tiny vision tower's 4-px patches merged 2x2 -> 4 tokens a frame
VIDEOS = ("11001", "01002")


def write_tiny_qwen2_vl(folder: Path, tokenizer_folder: Path) -> Path:
    from transformers import AutoTokenizer

    from components.common.hf_models import save_model
    from components.common.tiny_models import build_tiny

    # vision ids (vocab - 1 ... vocab - 4) sit above the tokenizer's 512 text ids; no processor
    # config is saved, so the backbone falls back to Qwen2-VL's CLIP normalisation
    model = build_tiny("qwen2_vl", text_config={"vocab_size": 520})
    return save_model(model, folder, AutoTokenizer.from_pretrained(str(tokenizer_folder)))


def write_tiny_dino(folder: Path) -> Path:
    from components.common.hf_models import save_model
    from components.common.tiny_models import build_tiny

    return save_model(build_tiny("dinov2"), folder)


def write_mp4(path: Path, n_frames: int = 12, width: int = 40, height: int = 24, seed: int = 0) -> Path:
    """A short mpeg4 video (8 fps) of a bright square moving right over a noisy background."""
    from components.common.video import write_video

    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 60, (n_frames, height, width, 3), dtype=np.uint8)
    for t in range(n_frames):
        x = 2 + 2 * t
        frames[t, 8:16, x:x + 8] = (230, 40, 40)
    return write_video(path, frames, fps=8)


QUESTIONS = {
    "s_ynqa": {"type_id": 3, "yn_question": "视频中有一个红色方块吗？", "yn_answer": "yes"},
    "m_ynqa": {"type_id": [1, 8], "yn_question": "红色方块向右移动，且镜头固定不动？", "yn_answer": "no"},
    "s_mcqa": {"type_id": 1, "mc_question": "红色方块在做什么？",
               "mc_option": ["A. 向左移动", "B. 向右移动", "C. 其余选项均不正确。"], "mc_answer": "B"},
    "m_mcqa": {"type_id": [5, 7], "mc_question": "关于方块的颜色和运动顺序，哪项正确？",
               "mc_option": ["A. 蓝色方块先出现", "B. 以上选项均正确", "C. 红色方块先向右移动"], "mc_answer": "C"},
}


def write_omnivchall(root: Path) -> Path:
    """``root/{train,val,test}/<split>_{s_ynqa,m_ynqa,s_mcqa,m_mcqa}.json`` + ``root/all_video/*.mp4``."""
    for i, vid in enumerate(VIDEOS):
        write_mp4(root / "all_video" / f"{vid}.mp4", seed=i)
    for split in ("train", "val", "test"):
        (root / split).mkdir(parents=True, exist_ok=True)
        for k, (stem, record) in enumerate(QUESTIONS.items()):
            item = {f"{stem}_id": 1, "video_id": VIDEOS[k % 2], **record}
            (root / split / f"{split}_{stem}.json").write_text(json.dumps([item], ensure_ascii=False, indent=1),
                                                               encoding="utf-8")
        (root / split / f"{split}_videos.txt").write_text("\n".join(VIDEOS) + "\n")
    return root
