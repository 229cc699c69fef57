"""build_env: the procedural environment's video specs (train / test)."""
from __future__ import annotations

import numpy as np

from components.anompi.config import CLASSES
from components.anompi.video import make_specs
from components.common.io import read_table, write_table


def build_env_stage(cfg, ctx) -> None:
    env = cfg.env
    rng = np.random.default_rng(env.seed)
    for split, n, offset in (("train", env.n_train, 0), ("test", env.n_test, env.n_train)):
        specs = make_specs(n, env, rng, id_offset=offset)
        write_table(ctx.out_dir / f"{split}.parquet", specs)
    counts = np.bincount(make_counts(ctx.out_dir / "train.parquet"), minlength=len(CLASSES))
    ctx.write_metrics({"n_train": env.n_train, "n_test": env.n_test,
                       **{f"train_{c}": int(k) for c, k in zip(CLASSES, counts)}})


def make_counts(path) -> np.ndarray:
    return read_table(path).column("label").to_numpy()


def load_specs(path) -> dict[str, np.ndarray]:
    table = read_table(path)
    return {name: table.column(name).to_numpy() for name in table.column_names}


def labels_only(specs: dict[str, np.ndarray]) -> np.ndarray:
    """The video-level labels: the only supervision any training stage receives."""
    return specs["label"].copy()
