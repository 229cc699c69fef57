"""The two digit benchmarks, both rebuilt offline from sklearn's bundled 8x8 digits.

The 1797 digits are shuffled once and cut into one disjoint chunk per domain (as DomainBed cuts
MNIST); every domain gets a DomainBed-style in/out split (the "out" part is the training-domain
validation set used for model selection).

- ``spurious_digits`` (primary): every domain shows the same upright digit, shrunk into the
  middle of a 16x16 canvas, plus one bright pixel on the outer ring of the canvas. Domain d owns
  ten ring pixels, one per class; with probability ``spurious_p`` the lit pixel is the one of the
  row's label, otherwise that of a random other class. The shortcut is therefore label-correlated
  and domain-specific (a teacher of domain d never sees a pixel of domain d' lit), and the test
  domain shows no shortcut at all (``test_split`` returns its clean images).
- ``rotated_digits`` (reported): domain d is its chunk rotated by ``angles[d]`` (RotatedMNIST).
- paper profile (``data.source = domainbed``): the DomainBed datasets named in ``benchmarks``,
  indexed from ``domainbed_root`` (``components.domed.domainbed``); ``x`` is then an
  ``ImageFiles`` that decodes the rows asked for, and no shortcut is ever lit.

Every training stage reads its data through ``source_split`` so the held-out test domain can
only ever reach ``evaluate`` (through ``test_split``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy import ndimage

from components.common.io import read_json, read_table, write_json_atomic, write_table

BENCHMARKS = ("spurious_digits", "rotated_digits")
N_CLASSES = 10
BORDER = 2          # spurious_digits: the digit fills the canvas minus this margin


def table_name(benchmark: str) -> str:
    return f"domains-{benchmark}.parquet"


def names_file(benchmark: str) -> str:
    return f"domains-{benchmark}.json"


@dataclass(frozen=True)
class Split:
    x: np.ndarray        # [N, 1, H, W] float32 in [0, 1] (digits) or ImageFiles (DomainBed)
    y: np.ndarray        # [N] int64
    domain: np.ndarray   # [N] int64
    index: np.ndarray    # [N] row ids in the domains table (to align teacher predictions)


def _digits(seed: int, n_domains: int):
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.images))
    return digits.images.astype(np.float32) / 16.0, digits.target, np.array_split(order, n_domains)


def _out_flags(n: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    out = np.zeros(n, dtype=bool)
    out[rng.permutation(n)[: int(round(fraction * n))]] = True
    return out


def ring_pixels(size: int) -> np.ndarray:
    """Flat indices of the outer ring of a size x size canvas, walked clockwise from (0, 0)."""
    top = [(0, c) for c in range(size)]
    right = [(r, size - 1) for r in range(1, size)]
    bottom = [(size - 1, c) for c in range(size - 2, -1, -1)]
    left = [(r, 0) for r in range(size - 2, 0, -1)]
    return np.array([r * size + c for r, c in top + right + bottom + left])


def shortcut_pixels(n_domains: int, size: int) -> np.ndarray:
    """[n_domains, N_CLASSES] flat pixel that codes class c in domain d: contiguous ring segments."""
    ring = ring_pixels(size)
    if len(ring) < n_domains * N_CLASSES:
        raise ValueError(f"a {size}px ring has {len(ring)} pixels, fewer than {n_domains} x {N_CLASSES} codes")
    return ring[: n_domains * N_CLASSES].reshape(n_domains, N_CLASSES)


def build_benchmark(benchmark: str, data, seed: int) -> dict[str, np.ndarray]:
    """Arrays of one benchmark: clean images ``x`` [N, size*size], ``y``, ``domain``, ``is_out``
    and ``shortcut`` (flat pixel lit on training rows; -1 for none)."""
    n_domains, size = data.n_domains, data.image_size
    images, targets, chunks = _digits(seed, n_domains)
    rng = np.random.default_rng(seed + 1)
    codes = shortcut_pixels(n_domains, size)
    xs, ys, domains, is_out, shortcut = [], [], [], [], []
    for d, rows in enumerate(chunks):
        for r in rows:
            xs.append(_render(benchmark, images[r], data, d))
        labels = targets[rows]
        ys.append(labels)
        domains.append(np.full(len(rows), d))
        is_out.append(_out_flags(len(rows), data.holdout_fraction, rng))
        if benchmark == "spurious_digits":
            shortcut.append(codes[d, _shortcut_classes(labels, data.spurious_p, rng)])
        else:
            shortcut.append(np.full(len(rows), -1))
    x = np.stack(xs)
    if benchmark == "spurious_digits" and data.spurious_noise > 0:
        x = _add_noise(x, data.spurious_noise, np.random.default_rng(seed + 2))
    return {"x": x.reshape(len(xs), -1).astype(np.float32),
            "y": np.concatenate(ys).astype(np.int64), "domain": np.concatenate(domains).astype(np.int64),
            "is_out": np.concatenate(is_out), "shortcut": np.concatenate(shortcut).astype(np.int64)}


def _render(benchmark: str, image: np.ndarray, data, domain: int) -> np.ndarray:
    size = data.image_size
    if benchmark == "rotated_digits":
        big = ndimage.zoom(image, size / image.shape[0], order=1)
        return np.clip(ndimage.rotate(big, data.angles[domain], reshape=False, order=1), 0.0, 1.0)
    if benchmark == "spurious_digits":
        inner = size - 2 * BORDER
        canvas = np.zeros((size, size), dtype=np.float32)
        canvas[BORDER:BORDER + inner, BORDER:BORDER + inner] = np.clip(
            ndimage.zoom(image, inner / image.shape[0], order=1), 0.0, 1.0)
        return canvas
    raise ValueError(f"unknown benchmark {benchmark!r}; known: {BENCHMARKS}")


def _add_noise(x: np.ndarray, std: float, rng: np.random.Generator) -> np.ndarray:
    """Gaussian pixel noise on the digit area only (the ring stays dark for the shortcut):
    a harder digit makes the shortcut worth more to a teacher."""
    noisy = x.copy()
    inner = (slice(None), slice(BORDER, -BORDER), slice(BORDER, -BORDER))
    noisy[inner] = np.clip(noisy[inner] + rng.normal(0.0, std, noisy[inner].shape), 0.0, 1.0)
    return noisy


def _shortcut_classes(labels: np.ndarray, p: float, rng: np.random.Generator) -> np.ndarray:
    """The class each row's lit pixel codes: its label with probability p, else another class."""
    other = (labels + rng.integers(1, N_CLASSES, len(labels))) % N_CLASSES
    return np.where(rng.random(len(labels)) < p, labels, other)


def build_domains_stage(cfg, ctx) -> None:
    data = cfg.data
    metrics = {}
    for benchmark in data.benchmarks:
        if data.source == "domainbed":
            metrics.update(_index_domainbed(benchmark, data, ctx.out_dir))
            continue
        arrays = build_benchmark(benchmark, data, data.data_seed)
        write_table(ctx.out_dir / table_name(benchmark), {
            "x": list(arrays["x"]), "y": arrays["y"], "domain": arrays["domain"],
            "split": np.where(arrays["is_out"], "out", "in"), "shortcut": arrays["shortcut"]})
        write_json_atomic(ctx.out_dir / names_file(benchmark), {
            "domains": [str(d) for d in range(data.n_domains)], "classes": [str(c) for c in range(N_CLASSES)]})
        counts = np.bincount(arrays["domain"])
        has = arrays["shortcut"] >= 0
        codes = shortcut_pixels(data.n_domains, data.image_size)[arrays["domain"][has]]
        agree = (codes[np.arange(has.sum()), arrays["y"][has]] == arrays["shortcut"][has]).mean() if has.any() else 0.0
        metrics.update({f"{benchmark}/n_images": int(len(arrays["y"])),
                        f"{benchmark}/min_domain_size": int(counts.min()),
                        f"{benchmark}/shortcut_label_agreement": float(agree)})
    ctx.write_metrics(metrics)


def _index_domainbed(benchmark: str, data, out_dir) -> dict:
    """The file index of one DomainBed dataset (paths, not pixels) and its domain/class names."""
    from components.domed.domainbed import index_dataset

    arrays = index_dataset(data.domainbed_root, benchmark, data.holdout_fraction, data.data_seed)
    write_table(out_dir / table_name(benchmark), {
        "path": arrays["path"].tolist(), "y": arrays["y"], "domain": arrays["domain"],
        "split": np.where(arrays["is_out"], "out", "in"), "shortcut": arrays["shortcut"]})
    write_json_atomic(out_dir / names_file(benchmark), {
        "domains": arrays["domains"].tolist(), "classes": arrays["classes"].tolist()})
    counts = np.bincount(arrays["domain"])
    return {f"{benchmark}/n_images": int(len(arrays["y"])), f"{benchmark}/min_domain_size": int(counts.min()),
            f"{benchmark}/n_domains": len(arrays["domains"]), f"{benchmark}/n_classes": len(arrays["classes"]),
            f"{benchmark}/folds": len(fold_envs(data.test_envs, len(arrays["domains"])))}


def fold_envs(test_envs: list[int], n_domains: int) -> list[int]:
    """The test domains of one benchmark: the requested indices it has (DomainNet has 6 domains,
    the other DomainBed datasets 4, so one list serves them all)."""
    return [e for e in test_envs if e < n_domains]


def benchmark_names(folder, benchmark: str) -> dict[str, list[str]]:
    return read_json(folder / names_file(benchmark))


def load_domains(folder, benchmark: str, data=None) -> dict[str, np.ndarray]:
    """A benchmark's rows; ``x`` is an array of pixels (digits) or the image files (DomainBed,
    decoded at ``data.image_size`` when indexed). ``n_domains``/``n_classes`` come along."""
    table = read_table(folder / table_name(benchmark))
    names = benchmark_names(folder, benchmark)
    if "path" in table.column_names:
        from components.domed.domainbed import ImageFiles

        x = ImageFiles(np.asarray(table.column("path").to_pylist()), data.image_size, data.loader_threads)
    else:
        flat = np.asarray(table.column("x").to_pylist(), dtype=np.float32)
        side = int(round(np.sqrt(flat.shape[1])))
        x = flat.reshape(-1, 1, side, side)
    return {"x": x, "y": table.column("y").to_numpy(),
            "domain": table.column("domain").to_numpy(),
            "split": np.asarray(table.column("split").to_pylist()),
            "shortcut": table.column("shortcut").to_numpy(),
            "n_domains": len(names["domains"]), "n_classes": len(names["classes"])}


def take(x, rows) -> torch.Tensor:
    """Rows (positions or a slice) of a split's images as a float tensor, whether ``x`` is an
    in-memory array or ``ImageFiles``."""
    if isinstance(x, np.ndarray):
        return torch.as_tensor(x[rows if isinstance(rows, slice) else np.asarray(rows)])
    return x[rows]


def _select(arrays: dict[str, np.ndarray], rows: np.ndarray, with_shortcut: bool) -> Split:
    index = np.flatnonzero(rows)
    if not isinstance(arrays["x"], np.ndarray):        # DomainBed files: no shortcut to light
        return Split(arrays["x"].subset(index), arrays["y"][index], arrays["domain"][index], index)
    x = arrays["x"][index].copy()
    if with_shortcut:
        lit = arrays["shortcut"][index]
        flat = x.reshape(len(index), -1)
        has = lit >= 0
        flat[np.flatnonzero(has), lit[has]] = 1.0
    return Split(x, arrays["y"][index], arrays["domain"][index], index)


def source_split(arrays: dict[str, np.ndarray], test_env: int, split: str | None,
                 domains: list[int] | None = None) -> Split:
    """Rows of the training domains only (optionally a subset of them), ``in``, ``out`` or both
    (``None``), with their domain's shortcut pixel lit."""
    rows = arrays["domain"] != test_env
    if split is not None:
        rows &= arrays["split"] == split
    if domains is not None:
        if test_env in domains:
            raise ValueError(f"test domain {test_env} requested as a training domain")
        rows &= np.isin(arrays["domain"], domains)
    return _select(arrays, rows, with_shortcut=True)


def test_split(arrays: dict[str, np.ndarray], test_env: int) -> Split:
    """All rows (in and out) of the held-out domain, without any shortcut; only ``evaluate``
    may call this."""
    return _select(arrays, arrays["domain"] == test_env, with_shortcut=False)
