"""Which source domains each teacher trains on, and which teachers may score which sample.

DomED trains one teacher per source domain and distils each sample only from the teachers that
never saw the sample's domain. The mask built here is the whole mechanism: a teacher scoring
its own training domain gives over-confident, shortcut-carrying targets (seen-domain KD).
"""
from __future__ import annotations

import numpy as np

from components.common.io import write_json_atomic
from components.domed.data import benchmark_names, fold_envs

FILE = "allocation.json"


def teacher_domains(scheme: str, sources: list[int]) -> list[list[int]]:
    """tau_m for every teacher m, given the source domains of one fold."""
    if scheme == "single":
        return [[d] for d in sources]
    if scheme == "all":
        return [list(sources)]
    if scheme == "lodo":
        return [[d for d in sources if d != held] for held in sources]
    if scheme == "dual":  # neighbouring pairs on a ring, so every domain is seen by two teachers
        return [sorted({sources[i], sources[(i + 1) % len(sources)]}) for i in range(len(sources))]
    raise ValueError(f"unknown allocation scheme {scheme!r}")


def unseen_teachers(taus: list[list[int]], domain: int) -> list[int]:
    """U(d): indices of the teachers whose training domains exclude ``domain``."""
    return [m for m, tau in enumerate(taus) if domain not in tau]


def unseen_mask(sample_domains: np.ndarray, taus: list[list[int]]) -> np.ndarray:
    """[N, M] bool: True where teacher m never trained on sample n's domain."""
    seen = np.array([[d in tau for tau in taus] for d in np.asarray(sample_domains)], dtype=bool)
    mask = ~seen.reshape(len(sample_domains), len(taus))
    empty = ~mask.any(axis=1)
    if empty.any():
        raise ValueError(f"{int(empty.sum())} samples have no unseen teacher under this allocation")
    return mask


def allocate_stage(cfg, ctx) -> None:
    """Per benchmark (its domain count comes from ``build_domains``: 6 digit domains, 4 or 6
    DomainBed ones) and test domain: the teachers' domain subsets and U(d)."""
    out, metrics = {}, {}
    for benchmark in cfg.data.benchmarks:
        n_domains = len(benchmark_names(ctx.inputs["build_domains"], benchmark)["domains"])
        folds = {}
        for test_env in fold_envs(cfg.data.test_envs, n_domains):
            sources = [d for d in range(n_domains) if d != test_env]
            taus = teacher_domains(cfg.allocation.scheme, sources)
            folds[str(test_env)] = {
                "sources": sources,
                "teachers": taus,
                "unseen": {str(d): unseen_teachers(taus, d) for d in sources},
            }
        out[benchmark] = folds
        metrics[f"{benchmark}/teachers_per_fold"] = len(next(iter(folds.values()))["teachers"])
    write_json_atomic(ctx.out_dir / FILE, out)
    ctx.write_metrics(metrics)
