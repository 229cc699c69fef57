"""Task generator: six families of time-series questions with planted, located evidence.

Each example is a series (background + planted evidence), a question (family + integer
arguments), the option count, the answer, and the evidence segments ``[start, end)`` that the
answer depends on. Evidence locations are stored for evaluation and for synthesising SFT traces
only; no model input contains them.

Backgrounds are unit-variance AR(1), seasonal+trend, smoothed random walks, or windows of real
series shipped with statsmodels (sunspots, CO2, Nile, El Nino), resampled to the series length,
plus white sensor noise. Fine-scale evidence (short oscillation bursts at a period of 4 samples)
vanishes under area pooling, so a static full-series view at the per-view budget cannot see it,
while a zoomed view of the right window can; coarse evidence (level shifts, trends, slow rhythms)
stays visible at the coarse scale. The `short` family is fully visible in one view.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

N_OPTIONS = {"localize": 4, "compare": 2, "etiology": 4, "count": 5, "rhythm": 5, "short": 4}
FAMILY_ID = {name: i for i, name in enumerate(N_OPTIONS)}
ETIOLOGY = ("spike", "level_shift", "trend_change", "variance_burst")
RHYTHM_PERIODS = (48.0, 24.0, 12.0, 6.0, 3.0)
SHORT_CLASSES = ("up_trend", "down_trend", "periodic", "spike")
BURST_LEN = 32           # fine-scale event length (samples)
BURST_PERIOD = 4         # period of the burst oscillation: sums to zero over any 4 samples
N_ARGS = 2               # integer question arguments (window indices for `compare`)


@lru_cache(maxsize=1)
def real_series() -> tuple[np.ndarray, ...]:
    """Real series shipped inside the statsmodels wheel (no download)."""
    from statsmodels.datasets import co2, elnino, nile, sunspots

    out = [sunspots.load_pandas().data["SUNACTIVITY"].to_numpy(float),
           co2.load_pandas().data["co2"].interpolate().bfill().to_numpy(float),
           nile.load_pandas().data["volume"].to_numpy(float),
           elnino.load_pandas().data.drop(columns="YEAR").to_numpy(float).ravel()]
    return tuple(np.asarray(s[np.isfinite(s)], dtype=float) for s in out)


def _standardise(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / (x.std() + 1e-8)


def background(rng: np.random.Generator, n: int, real_share: float, noise: float) -> np.ndarray:
    if rng.random() < real_share:
        src = real_series()[rng.integers(len(real_series()))]
        width = int(rng.integers(max(8, int(0.5 * len(src))), len(src) + 1))
        start = int(rng.integers(0, len(src) - width + 1))
        chunk = src[start:start + width]
        x = np.interp(np.linspace(0, width - 1, n), np.arange(width), chunk)
        if rng.random() < 0.5:
            x = x[::-1].copy()
    else:
        kind = rng.integers(3)
        t = np.arange(n)
        if kind == 0:   # AR(1)
            phi = rng.uniform(0.9, 0.995)
            e = rng.normal(size=n)
            x = np.empty(n)
            x[0] = e[0]
            for i in range(1, n):
                x[i] = phi * x[i - 1] + e[i]
        elif kind == 1:  # seasonal + trend
            period = n / rng.uniform(1.5, 6.0)
            x = np.sin(2 * np.pi * t / period + rng.uniform(0, 2 * np.pi)) + rng.normal(0, 0.5) * t / n
        else:            # smoothed random walk
            x = np.cumsum(rng.normal(size=n))
            k = max(1, n // 64)
            x = np.convolve(x, np.ones(k) / k, mode="same")
    return _standardise(x) + rng.normal(0.0, noise, size=n)


def burst(rng: np.random.Generator, amp: float) -> np.ndarray:
    """A short oscillation at period 4 under a Hann envelope: zero-mean at any coarse scale."""
    t = np.arange(BURST_LEN)
    return amp * np.hanning(BURST_LEN) * np.sin(2 * np.pi * t / BURST_PERIOD + rng.choice([0.5, 1.0]) * np.pi / 2)


def bump(amp: float) -> np.ndarray:
    """A smooth low-frequency bump: what a candidate event looks like at the coarse scale.
    Backgrounds have unit variance plus sensor noise, so ``amp`` is in units of about one sigma."""
    return amp * np.hanning(BURST_LEN)


def _distinct_slots(rng: np.random.Generator, n: int, k: int, n_fine: int = 16) -> list[int]:
    """Start positions of k events, each inside its own fine window (no overlap, no edges)."""
    width = n // n_fine
    windows = rng.choice(n_fine, size=k, replace=False)
    starts = []
    for w in windows:
        lo, hi = w * width, (w + 1) * width - BURST_LEN
        starts.append(int(rng.integers(lo, max(lo + 1, hi + 1))))
    return starts


def make_example(family: str, rng: np.random.Generator, n: int, short_n: int, real_share: float,
                 noise: float, bump_amp: float = 2.0, burst_amp: tuple[float, float] = (1.4, 1.8)) -> dict:
    args = [0] * N_ARGS
    evidence: list[list[int]] = []
    decoys: list[list[int]] = []     # look-alike candidates (hidden; used for SFT detours only)
    if family == "short":
        n = short_n
    x = background(rng, n, real_share, noise) if family != "short" else rng.normal(0, 0.3, n)
    k_opts = N_OPTIONS[family]
    answer = int(rng.integers(k_opts))
    width = n // 16

    if family == "localize":
        # one real event (burst + bump) and 1-3 look-alike decoy bumps in other quarters: the
        # coarse view shows every candidate, only a zoom tells the real one from the decoys
        n_decoys = int(rng.integers(1, 4))
        wins_in_q = [w for w in range(16) if w // 4 == answer]
        w = int(rng.choice(wins_in_q))
        s = int(rng.integers(w * width, (w + 1) * width - BURST_LEN + 1))
        x[s:s + BURST_LEN] += burst(rng, rng.uniform(*burst_amp)) + bump(bump_amp)
        evidence.append([s, s + BURST_LEN])
        others = [v for v in range(16) if v // 4 != answer]
        for v in rng.choice(others, size=n_decoys, replace=False):
            d = int(rng.integers(v * width, (v + 1) * width - BURST_LEN + 1))
            x[d:d + BURST_LEN] += bump(bump_amp)
            decoys.append([d, d + BURST_LEN])
    elif family == "compare":
        # two given fine windows a < b each hold a burst; which is stronger? (0 the earlier a,
        # 1 the later b). Naming them in time order spares the reader a binding of question
        # slots to views: it compares the two zoomed bursts and their order in time.
        a, b = sorted(int(v) for v in rng.choice(16, size=2, replace=False))
        strong, weak = rng.uniform(1.0, 1.4), rng.uniform(0.35, 0.65)
        amps = (strong, weak) if answer == 0 else (weak, strong)
        for w, amp in zip((a, b), amps):
            s = int(rng.integers(w * width, (w + 1) * width - BURST_LEN + 1))
            x[s:s + BURST_LEN] += burst(rng, amp) + bump(rng.uniform(-0.5, 0.5))
            evidence.append([s, s + BURST_LEN])
        args = [a, b]
    elif family == "etiology":
        t0 = int(rng.integers(n // 8, n - n // 8))
        cause = ETIOLOGY[answer]
        if cause == "spike":
            x[t0:t0 + 3] += rng.choice([-1, 1]) * rng.uniform(3.0, 4.0)
            evidence.append([t0, t0 + 3])
        elif cause == "level_shift":
            x[t0:] += rng.choice([-1, 1]) * rng.uniform(1.0, 1.5)
            evidence.append([max(0, t0 - 16), min(n, t0 + 16)])
        elif cause == "trend_change":
            x[t0:] += rng.choice([-1, 1]) * rng.uniform(1.5, 2.5) * np.arange(n - t0) / (n - t0)
            evidence.append([t0, n])
        else:
            m = 48
            x[t0:t0 + m] += rng.normal(0.0, rng.uniform(1.2, 1.6), size=len(x[t0:t0 + m]))
            evidence.append([t0, min(n, t0 + m)])
    elif family == "count":
        # four candidate bumps; `answer` of them carry a burst. How many events?
        starts = _distinct_slots(rng, n, 4)
        real = set(rng.choice(4, size=answer, replace=False).tolist())
        for i, s in enumerate(starts):
            x[s:s + BURST_LEN] += bump(bump_amp) + (burst(rng, rng.uniform(*burst_amp)) if i in real else 0.0)
            evidence.append([s, s + BURST_LEN])   # every candidate must be inspected
    elif family == "rhythm":
        period = RHYTHM_PERIODS[answer] * rng.uniform(0.92, 1.08)
        t = np.arange(n)
        # backgrounds scaled down: real monthly series carry their own 12-sample seasonality
        x = 0.3 * x + rng.uniform(0.6, 0.9) * np.sin(2 * np.pi * t / period + rng.uniform(0, 2 * np.pi))
        evidence.append([0, n])   # global: any window shows it
    elif family == "short":
        t = np.arange(n)
        cls = SHORT_CLASSES[answer]
        if cls == "up_trend":
            x += np.linspace(0, rng.uniform(1.5, 3.0), n)
        elif cls == "down_trend":
            x -= np.linspace(0, rng.uniform(1.5, 3.0), n)
        elif cls == "periodic":
            x += rng.uniform(0.8, 1.2) * np.sin(2 * np.pi * t / 8 + rng.uniform(0, 2 * np.pi))
        else:
            p = int(rng.integers(2, n - 2))
            x[p] += rng.choice([-1, 1]) * rng.uniform(2.0, 3.0)
        evidence.append([0, n])
    else:
        raise ValueError(f"unknown family {family!r}; choose from {', '.join(N_OPTIONS)}")
    return {"family": family, "family_id": FAMILY_ID[family], "series": x.astype(np.float32),
            "length": int(n), "args": args, "n_options": k_opts, "answer": answer,
            "evidence": evidence, "decoys": decoys}


def generate(families: list[str], n_per_family: int, rng: np.random.Generator, n: int, short_n: int,
             real_share: float, noise: float, bump_amp: float = 2.0,
             burst_amp: tuple[float, float] = (1.4, 1.8)) -> list[dict]:
    return [make_example(f, rng, n, short_n, real_share, noise, bump_amp, burst_amp)
            for f in families for _ in range(n_per_family)]


def to_columns(examples: list[dict], n: int) -> dict:
    """Columns for a parquet table; series are zero-padded to ``n`` (``length`` says how much)."""
    series = np.zeros((len(examples), n), dtype=np.float32)
    for i, ex in enumerate(examples):
        series[i, :ex["length"]] = ex["series"]
    return {"family": [e["family"] for e in examples],
            "family_id": [e["family_id"] for e in examples],
            "series": [row.tolist() for row in series],
            "length": [e["length"] for e in examples],
            "args": [e["args"] for e in examples],
            "n_options": [e["n_options"] for e in examples],
            "answer": [e["answer"] for e in examples],
            "evidence": [e["evidence"] for e in examples],
            "decoys": [e["decoys"] for e in examples]}


def generate_tasks_stage(cfg, ctx) -> None:
    from components.common.io import write_json_atomic, write_table
    from components.common.seeds import seed_everything

    if cfg.paper.enabled:   # the paper's benchmarks from the user's folders instead
        from components.artist.benchmarks import benchmark_tasks_stage

        return benchmark_tasks_stage(cfg, ctx)
    d = cfg.data
    sizes = {"train": d.n_train, "val": d.n_val, "test": d.n_test}
    summary = {}
    for i, (split, size) in enumerate(sizes.items()):
        rng = seed_everything(d.seed * 10 + i)   # one fixed stream per split
        examples = generate(d.families, size, rng, d.length, d.short_length,
                            d.real_background_share, d.sensor_noise, d.bump_amp, tuple(d.burst_amp))
        write_table(ctx.out_dir / f"{split}.parquet", to_columns(examples, d.length))
        summary[f"n_{split}"] = len(examples)
        ctx.progress(i + 1, len(sizes), f"{split}: {len(examples)} examples")
    write_json_atomic(ctx.out_dir / "families.json",
                      {f: {"n_options": N_OPTIONS[f]} for f in d.families})
    ctx.write_metrics(summary)
