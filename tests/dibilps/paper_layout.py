"""Tiny datasets in DiffusionPDE's published layout (MATLAB files, generated here, never
downloaded): ``training/<pde>/<pde>_<k>.mat`` and ``testing/<pde>.mat`` with the published
variable names, inputs from a Gaussian random field and solutions from this repository's
solver (so the ground truth has zero residual under the guidance stencil)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from components.dibilps.data import make_inputs
from components.dibilps.paper_data import MAT_KEYS
from components.dibilps.pde import Solver, grf_coefficients


def fields(pde: str, n_samples: int, res: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = make_inputs(pde, grf_coefficients(rng, n_samples, 8, 1.5, 3.0), res)
    return Solver(pde, res).solve_batch(a), a


def write_mat(path: Path, pde: str, u: np.ndarray, a: np.ndarray) -> Path:
    import scipy.io

    path.parent.mkdir(parents=True, exist_ok=True)
    a_key, u_key = MAT_KEYS[pde]
    scipy.io.savemat(str(path), {a_key: a, u_key: u})
    return path


def write_diffusionpde(root: Path, pdes=("poisson", "darcy"), res: int = 16, n_train: int = 30,
                       n_test: int = 6, train_files: int = 2) -> Path:
    """The unzipped training.zip / testing.zip folders (MATLAB 5 files; the published Darcy
    files are v7.3, which needs h5py to read)."""
    root = Path(root)
    for i, pde in enumerate(pdes):
        u, a = fields(pde, n_train, res, seed=10 * i)
        for k, part in enumerate(np.array_split(np.arange(n_train), train_files), start=1):
            write_mat(root / "training" / pde / f"{pde}_{k}.mat", pde, u[part], a[part])
        u, a = fields(pde, n_test, res, seed=10 * i + 1)
        write_mat(root / "testing" / f"{pde}.mat", pde, u, a)
    return root
