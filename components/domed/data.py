"""RotatedDigits: DomainBed's RotatedMNIST rebuilt offline from sklearn's bundled digits.

The 1797 digits are upsampled to 16x16, shuffled once and cut into one disjoint chunk per
domain; chunk d is rotated by ``angles[d]``. Every domain gets a DomainBed-style in/out split
(the "out" part is the training-domain validation set used for model selection).

Every training stage reads its data through ``source_split`` so the held-out test domain can
only ever reach ``evaluate`` (through ``test_split``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from components.common.io import read_table, write_table

TABLE = "domains.parquet"


@dataclass(frozen=True)
class Split:
    x: np.ndarray        # [N, 1, H, W] float32 in [0, 1]
    y: np.ndarray        # [N] int64
    domain: np.ndarray   # [N] int64
    index: np.ndarray    # [N] row ids in the domains table (to align teacher predictions)


def rotated_digits(angles: list[float], image_size: int, holdout_fraction: float,
                   seed: int) -> dict[str, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images.astype(np.float32) / 16.0
    order = np.random.default_rng(seed).permutation(len(images))
    chunks = np.array_split(order, len(angles))
    zoom = image_size / images.shape[1]
    xs, ys, domains, is_out = [], [], [], []
    rng = np.random.default_rng(seed + 1)
    for d, (angle, rows) in enumerate(zip(angles, chunks)):
        for r in rows:
            big = ndimage.zoom(images[r], zoom, order=1)
            xs.append(np.clip(ndimage.rotate(big, angle, reshape=False, order=1), 0.0, 1.0))
        ys.append(digits.target[rows])
        domains.append(np.full(len(rows), d))
        out = np.zeros(len(rows), dtype=bool)
        out[rng.permutation(len(rows))[: int(round(holdout_fraction * len(rows)))]] = True
        is_out.append(out)
    return {
        "x": np.stack(xs).reshape(len(xs), -1).astype(np.float32),
        "y": np.concatenate(ys).astype(np.int64),
        "domain": np.concatenate(domains).astype(np.int64),
        "is_out": np.concatenate(is_out),
    }


def build_domains_stage(cfg, ctx) -> None:
    data = cfg.data
    if data.benchmark != "rotated_digits":
        raise NotImplementedError(
            "only the embedded RotatedDigits benchmark is implemented; the DomainBed image loader "
            "(paper profile) is not written yet")
    arrays = rotated_digits(data.angles, data.image_size, data.holdout_fraction, data.data_seed)
    write_table(ctx.out_dir / TABLE, {
        "x": list(arrays["x"]), "y": arrays["y"], "domain": arrays["domain"],
        "split": np.where(arrays["is_out"], "out", "in"),
    })
    counts = np.bincount(arrays["domain"])
    ctx.write_metrics({"n_images": int(len(arrays["y"])), "min_domain_size": int(counts.min()),
                       "n_domains": int(len(counts))})


def load_domains(folder) -> dict[str, np.ndarray]:
    table = read_table(folder / TABLE)
    x = np.asarray(table.column("x").to_pylist(), dtype=np.float32)
    side = int(round(np.sqrt(x.shape[1])))
    return {"x": x.reshape(-1, 1, side, side), "y": table.column("y").to_numpy(),
            "domain": table.column("domain").to_numpy(),
            "split": np.asarray(table.column("split").to_pylist())}


def _select(arrays: dict[str, np.ndarray], rows: np.ndarray) -> Split:
    index = np.flatnonzero(rows)
    return Split(arrays["x"][index], arrays["y"][index], arrays["domain"][index], index)


def source_split(arrays: dict[str, np.ndarray], test_env: int, split: str,
                 domains: list[int] | None = None) -> Split:
    """Rows of the training domains only (optionally a subset of them), ``in`` or ``out``."""
    rows = (arrays["domain"] != test_env) & (arrays["split"] == split)
    if domains is not None:
        if test_env in domains:
            raise ValueError(f"test domain {test_env} requested as a training domain")
        rows &= np.isin(arrays["domain"], domains)
    return _select(arrays, rows)


def test_split(arrays: dict[str, np.ndarray], test_env: int) -> Split:
    """All rows (in and out) of the held-out domain; only ``evaluate`` may call this."""
    return _select(arrays, arrays["domain"] == test_env)
