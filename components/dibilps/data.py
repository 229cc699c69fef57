"""Stages generate_pde_data and make_masks (one instance per PDE)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from components.common.io import read_json, write_json_atomic
from components.common.seeds import seed_everything
from components.dibilps.pde import Normaliser, Solver, darcy_coefficient, grf_coefficients, grf_on_grid

SPLITS = ("train", "val", "test")


def hr_res(res: int, factor: int) -> int:
    """Nodes of the refined grid: h -> h / factor, nested with the base grid."""
    return factor * (res - 1) + 1


def make_inputs(pde: str, coef: np.ndarray, n: int) -> np.ndarray:
    field = grf_on_grid(coef, n)
    return darcy_coefficient(field) if pde == "darcy" else field


def save_split(path: Path, u: np.ndarray, a: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        np.savez(fh, u=u.astype(np.float32), a=a.astype(np.float32))


def load_split(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    with np.load(Path(folder) / f"{split}.npz") as z:
        return z["u"], z["a"]


def load_normaliser(folder: Path) -> Normaliser:
    d = read_json(Path(folder) / "stats.json")
    return Normaliser(d["pde"], d["u_scale"], d["a_scale"])


def generate_pde_data_stage(cfg, ctx) -> None:
    d, pde = cfg.data, ctx.item["pde"]
    out = ctx.out_dir
    if cfg.paper.enabled:
        _copy_paper_data(cfg.paper, pde, out, d)
    else:
        rng = seed_everything(d.seed + {"poisson": 0, "darcy": 1, "helmholtz": 2}[pde] * 1000)
        counts = {"train": d.n_train, "val": d.n_val, "test": d.n_test}
        solver = Solver(pde, d.res, d.helmholtz_k)
        for i, split in enumerate(SPLITS):
            coef = grf_coefficients(rng, counts[split], d.grf_modes, d.grf_alpha, d.grf_tau)
            a = make_inputs(pde, coef, d.res)
            u = solver.solve_batch(a)
            save_split(out / f"{split}.npz", u, a)
            ctx.progress(i + 1, len(SPLITS) + 1, f"{pde} {split}")
            if split == "test":   # the same continuous inputs solved on the refined grid
                n_hr = hr_res(d.res, d.sr_factor)
                a_hr = make_inputs(pde, coef, n_hr)
                save_split(out / "test_hr.npz", Solver(pde, n_hr, d.helmholtz_k).solve_batch(a_hr), a_hr)
    u, a = load_split(out, "train")
    norm = Normaliser.fit(pde, u, a)
    write_json_atomic(out / "stats.json", norm.to_dict())
    u_t, a_t = load_split(out, "test")
    extra = {"gt_residual": ground_truth_residual(pde, out, d.helmholtz_k)} if cfg.paper.enabled else {}
    ctx.write_metrics({"n_train": int(len(u)), "n_test": int(len(u_t)), "res": int(u.shape[-1]),
                       "u_std": float(u.std()), "a_std": float(a.std()),
                       "hr_res": int(load_split(out, "test_hr")[0].shape[-1]), **extra})


def _copy_paper_data(paper, pde: str, out: Path, d) -> None:
    """paper profile: published arrays from disk; a val split is cut from the head of train.
    The refined test grid is the published file's when the layout has one, else solved here."""
    from components.dibilps.paper_data import read_split, refined_test

    u, a = read_split(paper, pde, "train", d.n_val + d.n_train)
    if u.shape[-1] != d.res:
        raise ValueError(f"data.res = {d.res} but the {pde} data under paper.data_root are "
                         f"{u.shape[-1]} x {u.shape[-1]}; set data.res to match")
    save_split(out / "train.npz", u[d.n_val:], a[d.n_val:])
    save_split(out / "val.npz", u[:d.n_val], a[:d.n_val])
    u, a = read_split(paper, pde, "test", d.n_test)
    save_split(out / "test.npz", u, a)
    hr = Path(paper.data_root).expanduser() / pde / "test_hr.npz"
    if paper.layout == "npz" and hr.exists():
        u_hr, a_hr = load_split(hr.parent, "test_hr")
        save_split(out / "test_hr.npz", u_hr[:d.n_test], a_hr[:d.n_test])
    else:
        save_split(out / "test_hr.npz", *refined_test(pde, a, hr_res(a.shape[-1], d.sr_factor), d.helmholtz_k))


def ground_truth_residual(pde: str, folder: Path, helmholtz_k: float) -> float:
    """Mean ||R||/n^2 of the test ground truth under this repository's stencil: how far the
    published data's discretisation is from the residual PDE guidance descends (0 for ours)."""
    import torch

    from components.dibilps.pde import residual_norm

    u, a = load_split(folder, "test")
    return float(residual_norm(pde, torch.from_numpy(u).double(), torch.from_numpy(a).double(),
                               helmholtz_k).mean())


# ----------------------------------------------------------------------------- masks
def n_observed(n: int, fraction: float) -> int:
    return max(1, int(round(fraction * n * n)))


def random_masks(rng: np.random.Generator, n_masks: int, n: int, fraction: float) -> np.ndarray:
    """(n_masks, n, n) boolean masks with exactly ``round(fraction n^2)`` observed nodes each."""
    k = n_observed(n, fraction)
    masks = np.zeros((n_masks, n * n), dtype=bool)
    for m in masks:
        m[rng.choice(n * n, size=k, replace=False)] = True
    return masks.reshape(n_masks, n, n)


def make_masks_stage(cfg, ctx) -> None:
    pde = ctx.item["pde"]
    data_dir = ctx.inputs["generate_pde_data"][pde]
    rng = np.random.default_rng(cfg.masks.seed)
    out = {}
    for split in ("val", "test"):
        u, _ = load_split(data_dir, split)
        out[split] = random_masks(rng, len(u), u.shape[-1], cfg.masks.obs_fraction)
    with open(ctx.out_dir / "masks.npz", "wb") as fh:
        np.savez(fh, **out)
    n = out["test"].shape[-1]
    ctx.write_metrics({"n_observed": int(out["test"][0].sum()),
                       "obs_fraction": float(out["test"].mean()), "grid_nodes": int(n * n)})


def load_masks(folder: Path) -> dict[str, np.ndarray]:
    with np.load(Path(folder) / "masks.npz") as z:
        return {k: z[k] for k in z.files}
