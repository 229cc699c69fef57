"""Paper-profile data: DiffusionPDE's published files (or plain npz) read from a local root,
the refined-grid test split for super-resolution, and the preflight checks of the paper keys.

DiffusionPDE (Huang et al., NeurIPS 2024) publishes each static PDE as MATLAB files of arrays
(N, S, S) on an S x S node grid with h = 1 / (S - 1) and zero Dirichlet boundary, the grid
convention of ``components.dibilps.pde``. Darcy files were saved with ``-v7.3`` (HDF5, read
with h5py); the others are MATLAB 5 files (scipy).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from components.common.preflight import PreflightError, require_dir
from components.common.readers import DatasetError, read_npz
from components.dibilps.pde import DARCY_HIGH, DARCY_LOW, Solver

# (coefficient / source a, solution u) variable names per PDE in DiffusionPDE's files
MAT_KEYS = {"darcy": ("thresh_a_data", "thresh_p_data"), "poisson": ("f_data", "phi_data"),
            "helmholtz": ("f_data", "psi_data")}
LAYOUTS = {
    "diffusionpde": "DiffusionPDE's unzipped data folder: training/<pde>/*.mat and testing/<pde>.mat",
    "npz": "a folder with <pde>/train.npz and <pde>/test.npz (arrays a, u of shape (N, S, S))",
}


def layout_patterns(layout: str, pde: str) -> tuple[str, ...]:
    if layout == "diffusionpde":
        return (f"training/{pde}/*.mat", f"testing/{pde}.mat")
    return (f"{pde}/train.npz", f"{pde}/test.npz")


# ----------------------------------------------------------------------------- MATLAB files
def is_v73(path: Path) -> bool:
    """MATLAB v7.3 files are HDF5 behind a text header that says so."""
    with open(path, "rb") as fh:
        return b"MATLAB 7.3" in fh.read(128)


def _h5py():
    try:
        import h5py
    except ImportError:
        return None
    return h5py


def mat_variables(path: Path) -> list[str]:
    if is_v73(path):
        h5py = _h5py()
        if h5py is None:
            raise DatasetError(f"{path}: a MATLAB v7.3 (HDF5) file; reading it needs h5py, which is not installed")
        with h5py.File(path, "r") as f:
            return list(f.keys())
    import scipy.io

    try:
        return [name for name, _, _ in scipy.io.whosmat(str(path))]
    except Exception as err:  # noqa: BLE001 - scipy raises several types for a bad file
        raise DatasetError(f"{path}: not a MATLAB file ({err})") from None


def read_mat(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The named (N, S, S) arrays of a MATLAB file, as float32 in MATLAB's index order."""
    missing = [n for n in names if n not in mat_variables(path)]
    if missing:
        raise DatasetError(f"{path}: missing variable {missing[0]!r} (expected {', '.join(names)})")
    if is_v73(path):
        with _h5py().File(path, "r") as f:     # HDF5 stores MATLAB arrays with axes reversed
            out = {n: np.asarray(f[n], dtype=np.float32).transpose(2, 1, 0) for n in names}
    else:
        import scipy.io

        raw = scipy.io.loadmat(str(path), variable_names=list(names))
        out = {n: np.asarray(raw[n], dtype=np.float32) for n in names}
    for n, arr in out.items():
        if arr.ndim != 3 or arr.shape[1] != arr.shape[2]:
            raise DatasetError(f"{path}: variable {n!r} must be (N, S, S), got shape {arr.shape}")
    return out


def read_diffusionpde(root: Path, pde: str, split: str, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """(u, a) of the first ``limit`` samples of ``training/<pde>/*.mat`` (files in name order)
    or ``testing/<pde>.mat``."""
    files = sorted((root / "training" / pde).glob("*.mat")) if split == "training" else [root / "testing" / f"{pde}.mat"]
    a_key, u_key = MAT_KEYS[pde]
    us, as_, count = [], [], 0
    for path in files:
        arrays = read_mat(path, (a_key, u_key))
        us.append(arrays[u_key][:limit - count])
        as_.append(arrays[a_key][:limit - count])
        count += len(us[-1])
        if count >= limit:
            break
    return np.concatenate(us), np.concatenate(as_)


def read_npz_split(root: Path, pde: str, split: str, limit: int) -> tuple[np.ndarray, np.ndarray]:
    z = read_npz(str(root / pde / f"{split}.npz"), {"a": 3, "u": 3})
    return z["u"][:limit], z["a"][:limit]


def read_split(paper, pde: str, split: str, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """``split`` is "train" or "test"; returns (u, a) float32 (N, S, S)."""
    root = Path(paper.data_root).expanduser()
    if paper.layout == "diffusionpde":
        return read_diffusionpde(root, pde, "training" if split == "train" else "testing", limit)
    return read_npz_split(root, pde, split, limit)


# ----------------------------------------------------------------------------- refined test grid
def refine_inputs(pde: str, a: np.ndarray, n_hr: int) -> np.ndarray:
    """The published inputs live on the S x S grid only: their bilinear interpolant on the
    nested refined grid (coarse nodes keep their values); Darcy's is thresholded back to {3, 12}."""
    t = torch.from_numpy(np.asarray(a, dtype=np.float64))[:, None]
    hr = F.interpolate(t, size=(n_hr, n_hr), mode="bilinear", align_corners=True)[:, 0].numpy()
    if pde == "darcy":
        hr = np.where(hr >= (DARCY_HIGH + DARCY_LOW) / 2, DARCY_HIGH, DARCY_LOW)
    return hr


def refined_test(pde: str, a: np.ndarray, n_hr: int, helmholtz_k: float) -> tuple[np.ndarray, np.ndarray]:
    """(u_hr, a_hr): the refined inputs solved on the refined grid (never an upsampled u)."""
    a_hr = refine_inputs(pde, a, n_hr)
    return Solver(pde, n_hr, helmholtz_k).solve_batch(a_hr), a_hr


# ----------------------------------------------------------------------------- preflight
def check_backbone(paper) -> None:
    if paper.backbone != "diffusers":
        return
    import importlib.util

    if importlib.util.find_spec("diffusers") is None:     # found, not imported: preflight stays fast
        raise PreflightError("paper.backbone", paper.backbone, "'own' or install the paper extra "
                             "(pip install -e '.[paper]')", "needs diffusers, which is not installed")
    widths = {"paper.vae_block_out_channels": paper.vae_block_out_channels,
              "paper.unet_block_out_channels": paper.unet_block_out_channels,
              "paper.pixel_block_out_channels": paper.pixel_block_out_channels}
    for key, blocks in widths.items():
        if len(blocks) < 2 or any(w % paper.norm_num_groups for w in blocks):
            raise PreflightError(key, str(blocks), f"at least 2 widths, each a multiple of "
                                 f"paper.norm_num_groups = {paper.norm_num_groups}", "is not usable")


def check_data_root(paper, pdes: list[str]) -> None:
    """Every PDE's files exist, and the test file of each names the expected variables."""
    patterns = tuple(p for pde in pdes for p in layout_patterns(paper.layout, pde))
    root = require_dir("paper.data_root", paper.data_root, LAYOUTS[paper.layout], patterns)
    if paper.layout != "diffusionpde":
        return
    for pde in pdes:
        path = root / "testing" / f"{pde}.mat"
        try:
            names = mat_variables(path)
        except (DatasetError, ValueError, OSError) as err:
            raise PreflightError("paper.data_root", paper.data_root, LAYOUTS[paper.layout],
                                 f"has an unreadable {path.name} ({str(err).split(': ', 1)[-1]})") from None
        missing = [k for k in MAT_KEYS[pde] if k not in names]
        if missing:
            raise PreflightError("paper.data_root", paper.data_root, LAYOUTS[paper.layout],
                                 f"has testing/{pde}.mat without variable {missing[0]!r}")
