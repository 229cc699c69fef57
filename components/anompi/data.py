"""build_env: the procedural environment's video specs (train / test)."""
from __future__ import annotations

import numpy as np

from components.anompi.config import CLASSES
from components.anompi.video import make_specs
from components.anompi import paper_stages
from components.common.io import read_table, write_table


SPLITS = ("train", "val", "test")


def split_specs(env) -> dict[str, dict[str, np.ndarray]]:
    """Each split from its own generator seed, so a new test seed leaves train/val unchanged."""
    sizes = {"train": env.n_train, "val": env.n_val, "test": env.n_test}
    seeds = {"train": env.seed, "val": env.val_seed, "test": env.test_seed}
    out, offset = {}, 0
    for split in SPLITS:
        out[split] = make_specs(sizes[split], env, np.random.default_rng(seeds[split]), id_offset=offset)
        offset += sizes[split]
    return out


def build_env_stage(cfg, ctx) -> None:
    if cfg.paper.enabled:                     # the video-LLM branch (paper_stages.py)
        return paper_stages.build_env(cfg, ctx)
    env = cfg.env
    for split, specs in split_specs(env).items():
        write_table(ctx.out_dir / f"{split}.parquet", specs)
    counts = np.bincount(make_counts(ctx.out_dir / "train.parquet"), minlength=len(CLASSES))
    ctx.write_metrics({"n_train": env.n_train, "n_val": env.n_val, "n_test": env.n_test,
                       **{f"train_{c}": int(k) for c, k in zip(CLASSES, counts)}})


def make_counts(path) -> np.ndarray:
    return read_table(path).column("label").to_numpy()


def load_specs(path) -> dict[str, np.ndarray]:
    table = read_table(path)
    return {name: table.column(name).to_numpy() for name in table.column_names}


def labels_only(specs: dict[str, np.ndarray]) -> np.ndarray:
    """The video-level labels: the only supervision any training stage receives."""
    return specs["label"].copy()
