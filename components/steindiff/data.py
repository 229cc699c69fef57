"""prepare_data: the mixture spec with reference samples, and the digits splits."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from components.common.io import read_bytes, read_json, write_bytes_atomic, write_json_atomic
from components.steindiff.mixture import Mixture


def save_npy(path: Path, array: np.ndarray) -> None:
    buf = io.BytesIO()
    np.save(buf, np.asarray(array))
    write_bytes_atomic(path, buf.getvalue())


def load_npy(path: Path) -> np.ndarray:
    return np.load(io.BytesIO(read_bytes(path)))


def load_digits_scaled() -> tuple[np.ndarray, np.ndarray]:
    """sklearn digits (ships with the package, no download), pixels 0..16 mapped to [-1, 1]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return (digits.data / 8.0 - 1.0).astype(np.float32), digits.target.astype(np.int64)


def split_indices(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(seed).permutation(n)
    n_test = int(round(n * test_fraction))
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def prepare_data_stage(cfg, ctx) -> None:
    d = cfg.data
    mixture = Mixture.ring(d.n_modes, d.radius, d.mode_std)
    write_json_atomic(ctx.out_dir / "mixture.json", mixture.to_dict())
    save_npy(ctx.out_dir / "mixture_reference.npy",
             mixture.sample(d.n_reference, np.random.default_rng(d.reference_seed)))
    # a second true-sample set for the premise checks, so they never look at the test reference
    save_npy(ctx.out_dir / "mixture_validation.npy",
             mixture.sample(d.n_reference, np.random.default_rng(d.validation_seed)))

    x, y = load_digits_scaled()
    train, test = split_indices(len(x), d.digits_test_fraction, d.split_seed)
    save_npy(ctx.out_dir / "digits_train_x.npy", x[train])
    save_npy(ctx.out_dir / "digits_train_y.npy", y[train])
    save_npy(ctx.out_dir / "digits_test_x.npy", x[test])
    save_npy(ctx.out_dir / "digits_test_y.npy", y[test])
    ctx.write_metrics({"digits_train": int(len(train)), "digits_test": int(len(test)),
                       "digits_std": float(x[train].std()), "mixture_modes": d.n_modes})


def load_mixture(data_dir: Path) -> Mixture:
    return Mixture.from_dict(read_json(Path(data_dir) / "mixture.json"))
