"""Video files and frame folders as uint8 RGB frames (paper profiles with video data).

    n = count_frames(path)                            # frames in the video
    frames = read_video(path, n_frames=16)            # 16 frames at uniform positions: (16, H, W, 3)
    frames = read_video(path, indices=[0, 5, 9], size=224)   # chosen frames, resized to 224 x 224
    write_video(path, frames, fps=8)                  # an mp4 (MPEG-4 Part 2), e.g. a test fixture

``path`` is either a video file that FFmpeg decodes (read through PyAV: mp4, avi, mkv, webm...)
or a folder of frame images (jpg / jpeg / png / bmp, taken in file-name order), the
pre-extracted layout several data sets publish. Frame ``i`` is the i-th decoded frame in
presentation order (the i-th image of a folder). Frames come back as a ``(n, H, W, 3)`` uint8
array; ``size`` resizes them with PIL's bilinear filter (an int: a square; a pair: width, height).

A long video is never held in memory: only the requested frames are converted and kept. To
sample ``n_frames`` uniformly the frame count must be known; the container's count is used
when it has one and checked against the decoded count (a second pass corrects a wrong one).
Every failure raises ``VideoReadError`` with the file's path in its message.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np

FRAME_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp")


class VideoReadError(ValueError):
    """A video that cannot be read; the message names the file or folder."""


def uniform_indices(n_available: int, n_frames: int) -> np.ndarray:
    """``n_frames`` positions at the midpoints of equal cells over ``n_available`` frames
    (repeats when the video is shorter than ``n_frames``)."""
    if n_available <= 0:
        raise ValueError("a video with no frames has no positions to sample")
    return ((np.arange(n_frames) + 0.5) * n_available / n_frames).astype(int).clip(0, n_available - 1)


def _resize(image, size):
    """PIL image -> uint8 RGB array, resized (bilinear) when ``size`` is given."""
    from PIL import Image

    image = image.convert("RGB")
    if size is not None:
        wh = (size, size) if isinstance(size, int) else tuple(size)
        image = image.resize(wh, Image.BILINEAR)
    return np.asarray(image, dtype=np.uint8)


def _frame_files(folder: Path) -> list[Path]:
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in FRAME_EXTENSIONS)
    if not files:
        raise VideoReadError(f"{folder}: a frame folder with no {'/'.join(FRAME_EXTENSIONS)} images")
    return files


def _check(path: str | Path) -> Path:
    path = Path(path)
    if not path.exists():
        raise VideoReadError(f"{path}: no such video file or frame folder")
    return path


def _decode(path: Path, keep: set[int] | None, size) -> tuple[int, dict[int, np.ndarray]]:
    """One pass over a video file: (decoded count, {index: frame} for ``keep``; None: all).
    Frames outside ``keep`` are decoded but never converted."""
    import av

    picked: dict[int, np.ndarray] = {}
    count = 0
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoReadError(f"{path}: the file has no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            for frame in container.decode(stream):
                if keep is None or count in keep:
                    picked[count] = _resize(frame.to_image(), size)
                count += 1
    except av.FFmpegError as err:
        raise VideoReadError(f"{path}: FFmpeg cannot decode it ({type(err).__name__}: {err})") from None
    if count == 0:
        raise VideoReadError(f"{path}: no frame could be decoded")
    return count, picked


def _container_count(path: Path) -> int:
    """The frame count the container declares, or -1 (not every format stores one)."""
    import av

    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoReadError(f"{path}: the file has no video stream")
            return int(container.streams.video[0].frames or 0) or -1
    except av.FFmpegError as err:
        raise VideoReadError(f"{path}: FFmpeg cannot open it ({type(err).__name__}: {err})") from None


def count_frames(path: str | Path) -> int:
    """The number of frames of a video file (decoded, not the container's claim) or of images
    in a frame folder."""
    path = _check(path)
    if path.is_dir():
        return len(_frame_files(path))
    return _decode(path, set(), None)[0]


def read_video(path: str | Path, n_frames: int | None = None, *, indices: Iterable[int] | None = None,
               size: int | tuple[int, int] | None = None) -> np.ndarray:
    """Frames of a video file or frame folder as ``(n, H, W, 3)`` uint8 RGB.

    ``indices``: these frames, in this order (repeats allowed); ``n_frames``: that many at
    uniform positions (``uniform_indices``); neither: every frame (short clips only). An index
    past the end raises ``VideoReadError`` naming the file and its frame count."""
    if indices is not None and n_frames is not None:
        raise ValueError("pass n_frames or indices, not both")
    path = _check(path)
    if path.is_dir():
        from PIL import Image

        files = _frame_files(path)
        want = _wanted(path, len(files), n_frames, indices)
        out = {}
        for i in dict.fromkeys(want):
            try:
                with Image.open(files[i]) as image:
                    out[i] = _resize(image, size)
            except OSError as err:
                raise VideoReadError(f"{files[i]}: cannot read the frame image ({err})") from None
        return np.stack([out[i] for i in want])
    if indices is None and n_frames is None:
        count, picked = _decode(path, None, size)
        return np.stack([picked[i] for i in range(count)])
    if indices is not None:
        want = [int(i) for i in indices]
        count, picked = _decode(path, set(want), size)
        _wanted(path, count, None, want)
        return np.stack([picked[i] for i in want])
    meta = _container_count(path)
    if meta > 0:                              # one pass when the container's count is right
        want = uniform_indices(meta, n_frames).tolist()
        count, picked = _decode(path, set(want), size)
        if count == meta:
            return np.stack([picked[i] for i in want])
    else:
        count = count_frames(path)
    want = uniform_indices(count, n_frames).tolist()
    count, picked = _decode(path, set(want), size)
    return np.stack([picked[i] for i in want])


def _wanted(path: Path, count: int, n_frames: int | None, indices) -> list[int]:
    if indices is None:
        return list(range(count)) if n_frames is None else uniform_indices(count, n_frames).tolist()
    want = [int(i) for i in indices]
    bad = [i for i in want if not 0 <= i < count]
    if bad:
        raise VideoReadError(f"{path}: frame {bad[0]} asked for, but the video has {count} frames")
    return want


def write_video(path: str | Path, frames: np.ndarray, fps: int = 25, codec: str = "mpeg4") -> Path:
    """Encode ``(n, H, W, 3)`` uint8 RGB frames (H and W even) as a video file (yuv420p).
    ``codec``: any FFmpeg encoder PyAV ships, e.g. ``mpeg4`` or ``libx264``. Lossy: decoded
    pixels differ from ``frames`` by a few grey levels."""
    import av

    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
        raise ValueError(f"frames must be (n, H, W, 3) uint8, got {frames.shape} {frames.dtype}")
    if frames.shape[1] % 2 or frames.shape[2] % 2:
        raise ValueError(f"yuv420p needs an even height and width, got {frames.shape[1:3]}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"
        for frame in frames:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
    return path
