"""The paper path's parts on tiny stand-ins: the fixture video through the shared reader, the
OmniVCHall reader, the Qwen2-VL adapter (patch layout, left padding, the positive pathway's
hook), DINO saliency and preflight."""
import json

import numpy as np
import pandas as pd
import pytest
import torch

from components.common.preflight import PreflightError
from components.common.video import read_video
from components.tricd.config import TricdConfig
from components.tricd.paper_data import read_questions
from tests.tricd.paper_fixtures import (FRAME, VIDEOS, write_mp4, write_omnivchall, write_tiny_dino,
                                        write_tiny_qwen2_vl)

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory, tiny_checkpoints):
    from components.tricd.backbones import QwenVLBackbone

    folder = write_tiny_qwen2_vl(tmp_path_factory.mktemp("tricd-qwen") / "qwen2-vl", tiny_checkpoints.tokenizer())
    return QwenVLBackbone(folder, device="cpu", batch=2)


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    return write_omnivchall(tmp_path_factory.mktemp("tricd-omni") / "MyBench")


def test_fixture_video_through_the_shared_reader(tmp_path):
    """The fixture's mp4 decodes through components.common.video as the paper data builder
    reads it (uniform frames, square resize), and the square moves right in time."""
    path = write_mp4(tmp_path / "v.mp4", n_frames=12, width=40, height=24)
    frames = read_video(path, n_frames=4, size=16)
    assert frames.shape == (4, 16, 16, 3) and frames.dtype == np.uint8
    red = (frames[..., 0] > 150) & (frames[..., 1] < 110)
    cols = [np.nonzero(r.any(0))[0].mean() for r in red]
    assert all(b > a for a, b in zip(cols, cols[1:]))        # the square moves right


def test_omnivchall_questions_in_the_benchmark_schema(release):
    qa = pd.DataFrame(read_questions(release, "val"))
    assert qa.task.tolist() == ["s_yn", "c_yn", "s_mc", "c_mc"]
    assert qa.answer.tolist() == ["yes", "no", "B", "C"]
    assert qa.types.tolist() == [["object"], ["action", "camera"], ["action"], ["attribute", "temporal"]]
    assert qa.compositional.tolist() == [False, True, False, True]
    assert qa.adversarial.tolist() == ["", "", "none", "all"]      # at any position (C, then B)
    assert qa.adversarial_letter.tolist() == ["", "", "C", "B"]
    assert set(qa.video_id) == set(VIDEOS) and qa.options[2][1] == "B. 向右移动"


def test_patchify_matches_the_qwen2_vl_processor_layout(qwen):
    """A video of two equal frames is what the image processor makes of one image (it repeats
    the frame over the temporal patch); both must give the same flattened patches."""
    from transformers import Qwen2VLImageProcessorPil

    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (FRAME, FRAME, 3), dtype=np.uint8)
    proc = Qwen2VLImageProcessorPil(patch_size=qwen.patch, merge_size=qwen.merge, temporal_patch_size=qwen.tpatch,
                                    image_mean=list(qwen.mean), image_std=list(qwen.std), do_resize=False)
    ref = proc(images=[frame], return_tensors="pt")
    ours, grid = qwen.patchify(torch.from_numpy(np.stack([frame, frame]))[None].float())
    assert grid.tolist() == ref["image_grid_thw"][0].tolist() == [1, FRAME // qwen.patch, FRAME // qwen.patch]
    torch.testing.assert_close(ours, ref["pixel_values"].float(), atol=1e-5, rtol=1e-5)


def test_left_padding_and_the_positive_pathway(qwen, release):
    qa = pd.DataFrame(read_questions(release, "test"))
    enc = qwen.encode(qa)
    frames = read_video(release / "all_video" / f"{VIDEOS[0]}.mp4", n_frames=4, size=FRAME)
    videos = torch.from_numpy(np.stack([frames] * len(qa))).float()
    q, hidden, pad = qwen.forward(videos, enc, hidden=True)
    n_video = (4 // qwen.tpatch) * (FRAME // qwen.token_px) ** 2
    assert q.shape == (4, 5) and hidden.shape == (4, enc.max_len + n_video + 2, qwen.d_model)
    lengths = [len(a) + len(b) + n_video + 2 for a, b in zip(enc.prefix, enc.suffix)]
    assert (~pad).sum(1).tolist() == lengths
    alone = torch.cat([qwen.forward(videos[i:i + 1], enc[i:i + 1])[0] for i in range(4)])
    torch.testing.assert_close(q, alone, atol=1e-4, rtol=1e-4)          # left padding is inert
    ones = torch.ones(4, n_video)
    torch.testing.assert_close(qwen.forward(videos, enc, weight=ones)[0], q, atol=1e-5, rtol=1e-5)
    dimmed = qwen.forward(videos, enc, weight=0.1 * ones)[0]
    assert not torch.allclose(dimmed, q, atol=1e-4)                  # the hook reaches the decoder
    torch.testing.assert_close(qwen.forward(videos, enc)[0], q, atol=1e-5, rtol=1e-5)   # hook removed
    other = torch.from_numpy(np.stack([read_video(release / "all_video" / f"{VIDEOS[1]}.mp4", n_frames=4, size=FRAME)] * 4))
    assert not torch.allclose(qwen.forward(other.float(), enc)[0], q, atol=1e-4)   # the video matters


def test_tool_descriptions_through_the_language_model(qwen):
    emb, pad = qwen.describe(["reverse the order of the frames", "blur"])
    assert emb.shape[0] == 2 and emb.shape[2] == qwen.d_model and pad[1].sum() > 0 and not pad[0].any()


def test_dino_saliency_is_a_normalised_map(tmp_path):
    from components.tricd.saliency import dino_saliency, pool_pixels

    folder = write_tiny_dino(tmp_path / "dino")
    videos = np.random.default_rng(0).integers(0, 256, (2, 3, FRAME, FRAME, 3), dtype=np.uint8)
    sal = dino_saliency(videos, folder, device="cpu")
    assert sal.shape == (2, 3, FRAME, FRAME) and sal.min() >= 0 and sal.max() <= 1
    flat = sal.reshape(6, -1)                  # min-max per frame on DINO's grid, then upsampled
    assert (flat.max(1) > 0.8).all() and (flat.min(1) < 0.2).all()
    assert pool_pixels(sal, 4).shape == (2, 3, 4, 4)


def _paper(**paper) -> TricdConfig:
    return TricdConfig.for_profile("paper", overrides={"paper": paper})


def test_preflight_names_the_key_in_one_line(tmp_path, tiny_checkpoints, release):
    model = write_tiny_qwen2_vl(tmp_path / "qwen2-vl", tiny_checkpoints.tokenizer())
    dino = write_tiny_dino(tmp_path / "dino")
    ok = {"model_path": str(model), "data_root": str(release), "dino_path": str(dino), "frame_size": FRAME}
    _paper(**ok).preflight()
    cases = [({"model_path": ""}, "paper.model_path"),
             ({"model_path": str(dino)}, "paper.model_path"),                  # not a video LLM
             ({"data_root": str(tmp_path / "nowhere")}, "paper.data_root"),
             ({"frame_size": 20}, "paper.frame_size"),
             ({"dino_path": str(tmp_path)}, "paper.dino_path"),
             ({"visual_saliency": "sam"}, "paper.visual_saliency")]
    for change, key in cases:
        with pytest.raises(PreflightError) as err:
            _paper(**{**ok, **change}).preflight()
        assert str(err.value).startswith(key) and "\n" not in str(err.value)
    _paper(**{**ok, "dino_path": "", "visual_saliency": "spectral"}).preflight()
    empty = tmp_path / "empty"
    (empty / "val").mkdir(parents=True)
    with pytest.raises(PreflightError, match="paper.data_root.*train/train_s_ynqa.json"):
        _paper(**{**ok, "data_root": str(empty)}).preflight()
    no_videos = tmp_path / "no-videos"
    for split in ("train", "val", "test"):
        (no_videos / split).mkdir(parents=True)
        for stem in ("s_ynqa", "m_ynqa", "s_mcqa", "m_mcqa"):
            (no_videos / split / f"{split}_{stem}.json").write_text(json.dumps([]))
    with pytest.raises(PreflightError, match="all_video"):
        _paper(**{**ok, "data_root": str(no_videos)}).preflight()
