"""The paper path's pieces, fast: preflight (one line naming the key), the published layouts,
frame decoding, the chat's observation mask and the DPO loss at pi == pi_ref."""
import math

import numpy as np
import pytest
import torch

from components.anompi.config import AnompiConfig
from components.anompi.vau_data import VideoDataError, decode_frames, list_videos, xd_class
from components.common.preflight import PreflightError
from components.common.video import VideoReadError, uniform_indices
from tests.anompi.paper_fixtures import FRAME, write_tiny_qwen2_vl, write_ucf_crime


def paper_cfg(**paper):
    return AnompiConfig.for_profile("paper", {"paper": paper})


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory, tiny_checkpoints):
    return write_tiny_qwen2_vl(tmp_path_factory.mktemp("anompi-vlm") / "qwen2-vl", tiny_checkpoints.tokenizer())


@pytest.fixture(scope="module")
def ucf(tmp_path_factory):
    return write_ucf_crime(tmp_path_factory.mktemp("anompi-ucf") / "UCF_Crimes")


@pytest.fixture(scope="module")
def ucf_frames(tmp_path_factory):
    return write_ucf_crime(tmp_path_factory.mktemp("anompi-ucf-frames") / "UCF_Crimes", layout="frames")


def test_preflight_names_the_missing_key(tmp_path):
    with pytest.raises(PreflightError, match="paper.model_path"):
        paper_cfg().preflight()
    (tmp_path / "empty").mkdir()
    with pytest.raises(PreflightError, match="paper.model_path") as err:
        paper_cfg(model_path=str(tmp_path / "empty")).preflight()
    assert "\n" not in str(err.value)
    AnompiConfig.for_profile("small").preflight()          # the small profile needs no path


def test_preflight_checks_the_dataset_layout_and_model_family(tmp_path, tiny_vlm, ucf, tiny_checkpoints):
    """Bug fix: v2's paper profile refused valid paths; v1's ran the toy. Now valid paths pass,
    a wrong layout or model family fails on its key."""
    (tmp_path / "data").mkdir()
    with pytest.raises(PreflightError, match="paper.dataset_root.*Anomaly_Train.txt"):
        paper_cfg(model_path=str(tiny_vlm), dataset_root=str(tmp_path / "data")).preflight()
    with pytest.raises(PreflightError, match="paper.model_path.*qwen3"):
        paper_cfg(model_path=str(tiny_checkpoints.checkpoint("qwen3")), dataset_root=str(ucf)).preflight()
    with pytest.raises(PreflightError, match="paper.dataset"):
        paper_cfg(model_path=str(tiny_vlm), dataset_root=str(ucf), dataset="hivau").preflight()
    paper_cfg(model_path=str(tiny_vlm), dataset_root=str(ucf)).preflight()


def test_preflight_fails_on_a_missing_video_or_a_missing_decoder(tmp_path, tiny_vlm, monkeypatch):
    """Every listed video must resolve before anything runs; mp4 files need PyAV."""
    import importlib.util

    root = write_ucf_crime(tmp_path / "UCF", n_frames=4)
    (root / "Videos" / "Fighting" / "Fighting001_x264.mp4").unlink()
    with pytest.raises(PreflightError, match="paper.dataset_root.*Fighting001_x264.mp4") as err:
        paper_cfg(model_path=str(tiny_vlm), dataset_root=str(root)).preflight()
    assert "\n" not in str(err.value)
    good = write_ucf_crime(tmp_path / "UCF2", n_frames=4)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "av" else real(name, *a))
    with pytest.raises(PreflightError, match="paper.dataset_root.*PyAV"):
        paper_cfg(model_path=str(tiny_vlm), dataset_root=str(good)).preflight()
    folders = write_ucf_crime(tmp_path / "UCF3", n_frames=4, layout="frames")
    paper_cfg(model_path=str(tiny_vlm), dataset_root=str(folders)).preflight()     # frame folders need no codec


def test_ucf_crime_lists_classes_and_resolves_mp4_files_and_frame_folders(ucf, ucf_frames):
    """The same split lists name .mp4 files; a release may hold the videos or frame folders of
    the same name: both resolve and decode to the same shape (mp4 is lossy, folders exact)."""
    splits = list_videos("ucf_crime", ucf)
    assert [r["label_name"] for r in splits["train"]][:3] == ["Fighting", "Explosion", "Normal"]
    assert splits["test"][0]["event_start_frame"] == 4 and splits["test"][2]["event_start_frame"] == -1
    folders = list_videos("ucf_crime", ucf_frames)
    assert splits["train"][0]["path"].endswith("Fighting001_x264.mp4")
    assert folders["train"][0]["path"].endswith("Fighting001_x264")
    from_mp4 = decode_frames(splits["train"][0]["path"], 16, FRAME)
    from_folder = decode_frames(folders["train"][0]["path"], 16, FRAME)
    assert from_mp4.shape == from_folder.shape == (16, FRAME, FRAME, 3) and from_mp4.dtype == np.uint8
    # the event (frames 4-7 of 12, red channel at 255) survives the codec: same frames bright
    assert (from_mp4[..., 0].mean((1, 2)) > 150).tolist() == (from_folder[..., 0].mean((1, 2)) > 150).tolist()
    assert np.abs(from_mp4.astype(int) - from_folder.astype(int)).mean() < 20


def test_xd_violence_label_codes_and_sampling():
    assert xd_class("A.Beautiful.Mind.2001__#00-25-20_00-29-20_label_A") == "Normal"
    assert xd_class("Bad.Boys.1995__#01-11-55_01-12-40_label_B2-G-0") == "Shooting"
    with pytest.raises(VideoDataError):
        xd_class("no_label_here.mp4")
    assert uniform_indices(12, 4).tolist() == [1, 4, 7, 10]
    assert uniform_indices(3, 6).tolist() == [0, 0, 1, 1, 2, 2]


def test_undecodable_video_file_fails_naming_the_file(tmp_path):
    bad = tmp_path / "clip.mp4"
    bad.write_bytes(b"not a video")
    with pytest.raises(VideoReadError, match="clip.mp4"):
        decode_frames(bad, 4, FRAME)


def _tiny_llm(folder):
    from components.anompi.env import action_names
    from components.anompi.paper_stages import load_image_processor
    from components.anompi.vau_data import UCF_CLASSES
    from components.anompi.vlm import VideoLLM
    from components.common.hf_models import load_model, load_tokenizer

    model = load_model(folder, "vlm", device="cpu")
    return VideoLLM(model, load_tokenizer(folder), load_image_processor(str(folder)), UCF_CLASSES, action_names(4))


def test_chat_masks_observations_and_dpo_loss_is_log2_at_reference(tiny_vlm):
    """Only assistant tokens (thought, operator, answer) count; through the shared multi-turn DPO
    path (``multiturn_dpo.train_pairs``) the first loss, at pi == pi_ref, is log 2, and the step
    raises the winner's log-ratio over the loser's."""
    from components.anompi.vlm import Record, trajectory_logps
    from components.common.multiturn_dpo import train_pairs

    torch.manual_seed(0)
    llm = _tiny_llm(tiny_vlm)
    frames = np.random.default_rng(0).integers(0, 255, (16, FRAME, FRAME, 3), dtype=np.uint8)
    patches, grid = llm.patches(frames)
    tpf = llm.tokens_per_frame(grid)
    win = Record(turn_frames=[[2, 6, 10, 14], [0, 1, 3, 4]], actions=[0, 11], thoughts=[[40, 41], []], pred=7)
    lose = Record(turn_frames=[[2, 6, 10, 14]], actions=[11], thoughts=[[42]], pred=0)
    ids, mask, shown = llm.flatten(llm.conversation(win, 16, tpf))
    policy_tokens = (2 + len(llm.ids("<action>fine_0</action>")) + len(llm.ids("<answer>Fighting</answer>"))
                     + 2 * len(llm.ids("<|im_end|>\n")))
    assert sum(mask) == policy_tokens and shown == [2, 6, 10, 14, 0, 1, 3, 4]
    assert not any(m for i, m in zip(ids, mask) if i == llm.image_id)

    records = [win, lose]

    def logps(rows):
        return trajectory_logps(llm, [records[r] for r in rows], 16, [patches] * len(rows), grid)

    with torch.no_grad():
        before = logps([0, 1])
    result = train_pairs(logps, [(0, 1)], torch.optim.SGD(llm.model.parameters(), lr=1e-3), beta=0.5)
    assert result.losses[0] == pytest.approx(math.log(2), abs=1e-6)
    assert result.margins[0] == pytest.approx(0.0, abs=1e-6)
    with torch.no_grad():
        after = logps([0, 1])
    assert (after[0] - before[0]) - (after[1] - before[1]) > 0
