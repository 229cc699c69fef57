"""The shared video reader: mp4 files through PyAV and frame folders give the same frames at
the same indices; sampling, resizing and errors that name the file."""
import numpy as np
import pytest

from components.common.video import VideoReadError, count_frames, read_video, uniform_indices, write_video


def _clip(n=10, h=20, w=24):
    """Frame t is flat grey at 20 t (so the decoded index is readable through a lossy codec)."""
    return np.stack([np.full((h, w, 3), 20 * t, np.uint8) for t in range(n)])


@pytest.mark.parametrize("codec", ["mpeg4", "libx264"])
def test_mp4_round_trip_reads_every_frame_in_order(tmp_path, codec):
    frames = _clip()
    path = write_video(tmp_path / "clip.mp4", frames, fps=8, codec=codec)
    assert count_frames(path) == 10
    out = read_video(path)
    assert out.shape == frames.shape and out.dtype == np.uint8
    assert np.abs(out.astype(int) - frames.astype(int)).max() <= 4        # lossy, but close


def test_sampling_by_count_and_by_index_picks_those_frames(tmp_path):
    path = write_video(tmp_path / "clip.mp4", _clip(), fps=8)
    grey = lambda x: np.round(x[:, 0, 0, 0] / 20).astype(int).tolist()  # noqa: E731
    assert grey(read_video(path, n_frames=4)) == uniform_indices(10, 4).tolist() == [1, 3, 6, 8]
    assert grey(read_video(path, indices=[9, 0, 0, 5])) == [9, 0, 0, 5]
    assert read_video(path, n_frames=3, size=16).shape == (3, 16, 16, 3)
    assert read_video(path, indices=[1], size=(12, 8)).shape == (1, 8, 12, 3)
    assert grey(read_video(path, n_frames=15)) == uniform_indices(10, 15).tolist()   # repeats when short


def test_frame_folder_reads_like_the_video(tmp_path):
    from PIL import Image

    frames = _clip()
    folder = tmp_path / "clip"
    folder.mkdir()
    for t, f in enumerate(frames):
        Image.fromarray(f).save(folder / f"{t + 1:05d}.png")
    (folder / "notes.txt").write_text("not a frame")
    assert count_frames(folder) == 10
    assert np.array_equal(read_video(folder, indices=[3, 7]), frames[[3, 7]])      # lossless
    assert np.array_equal(read_video(folder, n_frames=4), frames[uniform_indices(10, 4)])


def test_errors_name_the_file(tmp_path):
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"not a video")
    with pytest.raises(VideoReadError, match="broken.mp4"):
        read_video(bad, n_frames=4)
    with pytest.raises(VideoReadError, match="missing.mp4"):
        read_video(tmp_path / "missing.mp4")
    path = write_video(tmp_path / "short.mp4", _clip(n=4), fps=8)
    with pytest.raises(VideoReadError, match="short.mp4.*4 frames"):
        read_video(path, indices=[4])
    (tmp_path / "empty").mkdir()
    with pytest.raises(VideoReadError, match="empty"):
        read_video(tmp_path / "empty", n_frames=2)
    with pytest.raises(ValueError, match="even"):
        write_video(tmp_path / "odd.mp4", _clip(h=21))


@pytest.mark.parametrize("claimed", [7, 13, -1])
def test_a_wrong_or_missing_container_count_is_corrected(tmp_path, monkeypatch, claimed):
    """Sampling uses the decoded count, whatever the container claims (or when it claims none)."""
    from components.common import video

    path = write_video(tmp_path / "clip.mp4", _clip(), fps=8)
    monkeypatch.setattr(video, "_container_count", lambda p: claimed)
    got = np.round(read_video(path, n_frames=4)[:, 0, 0, 0] / 20).astype(int).tolist()
    assert got == uniform_indices(10, 4).tolist()
