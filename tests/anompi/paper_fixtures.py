"""A tiny Qwen2-VL checkpoint (config-built, random) with tokenizer and image processor, and a
tiny UCF-Crime folder in the published layout (split lists, temporal annotations, mp4 videos
or frame folders)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

FRAME = 16          # pixels; the tiny vision tower's 4-px patches, merged 2x2 -> 4 tokens a frame


def write_tiny_qwen2_vl(folder: Path, tokenizer_folder: Path) -> Path:
    from transformers import AutoTokenizer, Qwen2VLImageProcessorPil

    from components.common.hf_models import save_model
    from components.common.tiny_models import build_tiny

    # vision ids sit above the tokenizer's 512 text ids, so text never collides with them
    model = build_tiny("qwen2_vl", text_config={"vocab_size": 520})
    save_model(model, folder, AutoTokenizer.from_pretrained(str(tokenizer_folder)))
    Qwen2VLImageProcessorPil(patch_size=4, merge_size=2, temporal_patch_size=2, min_pixels=FRAME * FRAME,
                             max_pixels=4 * FRAME * FRAME).save_pretrained(str(folder))
    return folder


def write_ucf_crime(root: Path, n_frames: int = 12, seed: int = 0, layout: str = "mp4") -> Path:
    """The release's layout with videos as mp4 files (``layout="mp4"``: Videos/<Class>/<name>.mp4,
    MPEG-4 through PyAV) or as pre-extracted frame folders (``"frames"``: Videos/<Class>/<name>/NNNNN.png)."""
    from PIL import Image

    from components.common.video import write_video

    rng = np.random.default_rng(seed)
    train = ["Fighting/Fighting001_x264.mp4", "Explosion/Explosion002_x264.mp4",
             "Training_Normal_Videos_Anomaly/Normal_Videos001_x264.mp4", "Fighting/Fighting003_x264.mp4",
             "Explosion/Explosion004_x264.mp4", "Training_Normal_Videos_Anomaly/Normal_Videos002_x264.mp4"]
    test = ["Fighting/Fighting010_x264.mp4", "Explosion/Explosion011_x264.mp4",
            "Testing_Normal_Videos_Anomaly/Normal_Videos_010_x264.mp4"]
    for i, rel in enumerate(train + test):
        frames = rng.integers(0, 60, (n_frames, FRAME + 4, FRAME + 8, 3), dtype=np.uint8)
        if "Normal" not in rel:
            frames[4:8, :, :, i % 3] = 255          # the "event": a bright burst in a few frames
        if layout == "mp4":
            write_video(root / "Videos" / rel, frames, fps=8)
            continue
        folder = root / "Videos" / Path(rel).with_suffix("")
        folder.mkdir(parents=True, exist_ok=True)
        for t, pixels in enumerate(frames):
            Image.fromarray(pixels).save(folder / f"{t + 1:05d}.png")
    splits = root / "Anomaly_Detection_splits"
    splits.mkdir(parents=True, exist_ok=True)
    (splits / "Anomaly_Train.txt").write_text("\n".join(train) + "\n")
    (splits / "Anomaly_Test.txt").write_text("\n".join(test) + "\n")
    (root / "Temporal_Anomaly_Annotation_for_Testing_Videos.txt").write_text(
        "Fighting010_x264.mp4  Fighting  4  8  -1  -1\nExplosion011_x264.mp4  Explosion  4  8  -1  -1\n"
        "Normal_Videos_010_x264.mp4  Normal  -1  -1  -1  -1\n")
    return root
