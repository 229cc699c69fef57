"""Metrics of decoded images, WA-WD as a standalone metric, and the CLAIMS.md criteria."""
from __future__ import annotations

import io

import numpy as np
import torch
from PIL import Image
from scipy import ndimage, stats

from components.common.io import read_bytes, read_json, write_json_atomic, write_table
from components.re2ic.codec import hific_decoder_macs_per_pixel, macs_per_pixel, read_bitstream, reconstruct
from components.re2ic.images import blocks_to_pixels
from components.re2ic.features import make_features
from components.re2ic.setmetrics import PooledVGG, set_quality
from components.re2ic.wd import haar_dwt, multi_wd, wavelet_wd


def _t(rgb: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(rgb, dtype=np.float32)).permute(2, 0, 1)[None]


def psnr(a: np.ndarray, b: np.ndarray, mask: np.ndarray | None = None) -> float:
    err = (a - b) ** 2
    mse = err[mask > 0].mean() if mask is not None else err.mean()
    return float(10 * np.log10(1.0 / max(mse, 1e-12)))


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    from skimage.metrics import structural_similarity
    return float(structural_similarity(a, b, channel_axis=-1, data_range=1.0))


def perceptual_distances(a, b, log2_sigma, dcfg) -> dict[str, float]:
    feats = make_features(dcfg).cpu()
    sigma = torch.from_numpy(np.asarray(log2_sigma, dtype=np.float32))[None, None]
    with torch.no_grad():
        fa, fb = feats(_t(a)), feats(_t(b))
        return {"wd": float(multi_wd(fa, fb, sigma, dcfg.num_levels)),
                "wawd": float(wavelet_wd(fa, fb, sigma, dcfg.band_weights, dcfg.num_levels))}


# ---- held-out realism statistics (never used in training) ----------------------------

LUMA = (np.float32(0.299), np.float32(0.587), np.float32(0.114))


def _gray(rgb: np.ndarray) -> np.ndarray:
    """Rec. 601 luma as elementwise products: a BLAS matrix product (the earlier ``rgb @ w``)
    may round differently on another CPU (a re-run on a different machine moved these
    statistics in the 8th digit); elementwise float32 arithmetic rounds the same everywhere."""
    rgb = rgb.astype(np.float32, copy=False)
    return LUMA[0] * rgb[..., 0] + LUMA[1] * rgb[..., 1] + LUMA[2] * rgb[..., 2]


def hf_energy_ratio(recon: np.ndarray, original: np.ndarray) -> float:
    """Level-1 Haar detail energy of the reconstruction over that of the original."""
    def detail(img):
        bands = haar_dwt(torch.from_numpy(_gray(img))[None, None])
        return sum(float(bands[k].square().sum()) for k in ("LH", "HL", "HH"))
    return detail(recon) / max(detail(original), 1e-12)


def texture_statistics(rgb: np.ndarray) -> np.ndarray:
    """Portilla-Simoncelli-flavoured summary: std, skew, kurtosis of two levels of Haar
    detail bands, and the normalised autocorrelation of the gray image at 5 lags."""
    x = torch.from_numpy(_gray(rgb))[None, None]
    out = []
    for _ in range(2):
        bands = haar_dwt(x)
        for k in ("LH", "HL", "HH"):
            v = bands[k].flatten().numpy().astype(np.float64)
            out += [v.std(), stats.skew(v) if v.std() > 1e-8 else 0.0,
                    np.log1p(max(stats.kurtosis(v, fisher=False), 0.0)) if v.std() > 1e-8 else 0.0]
        x = bands["LL"] / 2
    g = _gray(rgb).astype(np.float64) - _gray(rgb).mean()
    var = max((g * g).mean(), 1e-12)
    for dy, dx in ((0, 1), (1, 0), (1, 1), (0, 2), (2, 0)):
        out.append((g[dy:, dx:] * g[:g.shape[0] - dy, :g.shape[1] - dx]).mean() / var)
    return np.array(out)


def texture_distance(recon: np.ndarray, original: np.ndarray) -> float:
    s_r, s_o = texture_statistics(recon), texture_statistics(original)
    return float(np.linalg.norm(s_r - s_o) / (np.linalg.norm(s_o) + 1e-12))


# ---- graded distortions (claim c) --------------------------------------------------

def distort(rgb: np.ndarray, kind: str, level: float, seed: int = 0) -> np.ndarray:
    if kind == "blur":
        return ndimage.gaussian_filter(rgb, (level, level, 0))
    if kind == "noise":
        return np.clip(rgb + np.random.default_rng(seed).normal(0, level, rgb.shape), 0, 1).astype(np.float32)
    if kind == "jpeg":
        buf = io.BytesIO()
        Image.fromarray((rgb * 255).round().astype(np.uint8)).save(buf, "JPEG", quality=int(level))
        return np.asarray(Image.open(buf), dtype=np.float32) / 255.0
    raise ValueError(kind)


def metric_eval_stage(cfg, ctx) -> None:
    torch.set_num_threads(1)
    test = read_json(ctx.inputs["load_images"] / "images.json")["test"]
    crops = {k: v for k, v in np.load(ctx.inputs["load_images"] / "images.npz").items() if k in test}
    m, d = cfg.metric_eval, cfg.distortion
    rows, spearman = [], {}
    for name, rgb in crops.items():
        sigma = np.full(rgb.shape[:2], m.log2_sigma, dtype=np.float32)
        for kind, levels in (("blur", m.blur_sigmas), ("noise", m.noise_stds), ("jpeg", m.jpeg_qualities)):
            scores = {"wd": [], "wawd": [], "mse": []}
            for severity, level in enumerate(levels, 1):
                bad = distort(rgb, kind, level)
                dist = perceptual_distances(rgb, bad, sigma, d)
                dist["mse"] = float(((rgb - bad) ** 2).mean())
                for k in scores:
                    scores[k].append(dist[k])
                rows.append({"image": name, "distortion": kind, "severity": severity, **dist})
            for k, v in scores.items():
                spearman[f"{name}/{kind}/{k}"] = float(stats.spearmanr(range(len(v)), v)[0])
    texture = texture_resampling(m.texture_crop, d)
    write_table(ctx.out_dir / "graded.parquet", {k: [r[k] for r in rows] for k in rows[0]})
    write_json_atomic(ctx.out_dir / "metric_eval.json", {"spearman": spearman, "texture": texture})
    ctx.write_metrics({"min_spearman_wd": min(v for k, v in spearman.items() if k.endswith("/wd")),
                       "min_spearman_wawd": min(v for k, v in spearman.items() if k.endswith("/wawd")),
                       **{f"texture_{k}": v for k, v in texture.items()}})


def texture_resampling(size: int, dcfg) -> dict[str, float]:
    """Two disjoint crops of the same stationary texture (skimage grass): WD at large sigma
    should be far below WD at sigma = 0 (resampled texture is acceptable), MSE is not."""
    import skimage.data
    grass = skimage.data.grass().astype(np.float32) / 255.0
    a = np.repeat(grass[:size, :size, None], 3, -1)
    b = np.repeat(grass[size:2 * size, size:2 * size, None], 3, -1)
    out = {}
    for label, log2_sigma in (("sigma0", 0.0), ("sigma_large", float(dcfg.num_levels))):
        sig = np.full((size, size), log2_sigma, dtype=np.float32)
        for k, v in perceptual_distances(a, b, sig, dcfg).items():
            out[f"{k}_{label}"] = v
    out["wd_ratio"] = out["wd_sigma_large"] / out["wd_sigma0"]
    out["wawd_ratio"] = out["wawd_sigma_large"] / out["wawd_sigma0"]
    return out


# ---- codec evaluation and claims ---------------------------------------------------

def quality_metrics(qcfg, dcfg) -> dict[str, torch.nn.Module]:
    """LPIPS / DISTS modules named in ``quality.metrics`` (paper profile; none in small)."""
    if not qcfg.metrics:
        return {}
    from components.re2ic.perceptual import load_metric
    return {name: load_metric(name, dcfg.vgg_weights, getattr(qcfg, f"{name}_weights"))
            for name in qcfg.metrics}


def decoded_quality(rgb, recon, regions, name, block, dcfg, quality: dict | None = None) -> dict:
    """Everything measured on one decoded image: fidelity (PSNR, salient-region PSNR, SSIM),
    the training objectives (WD, WA-WD with the image's sigma map), the held-out realism
    statistics, and LPIPS / DISTS when configured."""
    salient = blocks_to_pixels(regions[f"{name}/blocks"], block)[..., None].repeat(3, -1)
    row = {"psnr": psnr(recon, rgb), "psnr_salient": psnr(recon, rgb, salient), "ssim": ssim(recon, rgb),
           **perceptual_distances(rgb, recon, regions[f"{name}/log2_sigma"], dcfg),
           "hf_ratio": hf_energy_ratio(recon, rgb), "texture_dist": texture_distance(recon, rgb)}
    with torch.no_grad():
        for metric_name, metric in (quality or {}).items():
            row[metric_name] = float(metric(_t(recon), _t(rgb))[0])
    return row


def decode_stage(cfg, ctx) -> None:
    """One item per fit item (loss, seed): decode each of its bitstreams from the bytes alone,
    check the reconstruction is bit-identical to the encoder's, and measure it. Running per
    item, decoding and measuring overlap with the fits still running on the other core."""
    torch.set_num_threads(1)
    folder = ctx.inputs["fit_codec"]
    crops = dict(np.load(ctx.inputs["load_images"] / "images.npz"))
    regions = dict(np.load(ctx.inputs["saliency"] / "regions.npz"))
    fit_log = read_json(folder / "fit_log.json")
    quality = quality_metrics(cfg.quality, cfg.distortion)
    loss, seed = ctx.item["loss"], int(ctx.item["seed"])
    rows = []
    for stem, fit in sorted(fit_log.items()):
        path = folder / f"{stem}.bin"
        parsed = read_bitstream(read_bytes(path))
        recon = reconstruct(parsed["model"], parsed["latents"], parsed["weights"],
                            parsed["weight_step_log2"], parsed["blocks"], parsed["block"],
                            parsed["noise_seed"])
        same = bool(np.array_equal(recon, np.load(folder / f"{stem}_encoder_recon.npy")))
        np.save(ctx.out_dir / f"{stem}.npy", recon)
        h, w = recon.shape[:2]
        rows.append({"loss": loss, "seed": seed, "image": fit["image"], "lam": float(fit["lam"]),
                     "bits": 8 * path.stat().st_size, "bpp": 8 * path.stat().st_size / (h * w),
                     "bit_exact": same,
                     **decoded_quality(crops[fit["image"]], recon, regions, fit["image"],
                                       cfg.regions.block, cfg.distortion, quality)})
        ctx.progress(len(rows), len(fit_log), stem)
    write_json_atomic(ctx.out_dir / "decoded.json", rows)
    ctx.write_metrics({"n_decoded": len(rows), "all_bit_exact": float(all(r["bit_exact"] for r in rows))})


def at_bpp(rows: list[dict], metric: str, bpp: float) -> float:
    """Metric at a given rate by linear interpolation in log-bpp over one RD curve."""
    pts = sorted((np.log(r["bpp"]), r[metric]) for r in rows)
    xs, ys = zip(*pts)
    if len(xs) == 1 or not xs[0] <= np.log(bpp) <= xs[-1]:
        return float(ys[int(np.argmin(np.abs(np.array(xs) - np.log(bpp))))])
    return float(np.interp(np.log(bpp), xs, ys))


def matched_rate(a: list[dict], b: list[dict]) -> tuple[float, float]:
    """A common rate for two RD curves: geometric middle of their overlap, else the middle of
    the closest pair; also the relative bpp gap (0 when the ranges overlap)."""
    ra, rb = [r["bpp"] for r in a], [r["bpp"] for r in b]
    lo, hi = max(min(ra), min(rb)), min(max(ra), max(rb))
    if lo <= hi:
        return float(np.sqrt(lo * hi)), 0.0
    pa, pb = min(((x, y) for x in ra for y in rb), key=lambda p: abs(np.log(p[0] / p[1])))
    return float(np.sqrt(pa * pb)), float(abs(pa - pb) / min(pa, pb))


def bd_rate(anchor: list[dict], test: list[dict], quality: str, higher_better: bool = True) -> float:
    """Bjontegaard-style rate difference (%) at equal quality, piecewise-linear in log-rate;
    NaN when the quality ranges do not overlap or a curve has < 2 points."""
    def curve(rows):
        pts = sorted((r[quality] * (1 if higher_better else -1), np.log(r["bpp"])) for r in rows)
        return np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    qa, la = curve(anchor)
    qt, lt = curve(test)
    lo, hi = max(qa.min(), qt.min()), min(qa.max(), qt.max())
    if len(qa) < 2 or len(qt) < 2 or lo >= hi:
        return float("nan")
    grid = np.linspace(lo, hi, 64)
    return float((np.exp(np.mean(np.interp(grid, qt, lt) - np.interp(grid, qa, la))) - 1) * 100)


def compare_at_matched_rate(by_curve, pairs, loss: str, anchor: str, metrics) -> list[dict]:
    """For each (image, seed): the metrics of two losses' RD curves at their common rate."""
    out = []
    for name, seed in pairs:
        a, m = by_curve[(name, seed, loss)], by_curve[(name, seed, anchor)]
        bpp, gap = matched_rate(a, m)
        out.append({"image": name, "seed": seed, "bpp": bpp, "bpp_gap": gap,
                    **{f"{k}_{tag}": at_bpp(rows, k, bpp) for k in metrics
                       for tag, rows in ((loss, a), (anchor, m))}})
    return out


def premise_checks(by_curve, val_pairs, losses) -> dict:
    """On the validation crops only: (P1) each WD-type fit beats the MSE fit on its own
    training objective at matched rate (else the fits are not converged, or the objective is
    not being optimised, and a comparison would say nothing); (P2) every MSE fit loses at
    least 40 % of the high-frequency energy (the low-rate regime the claim is about)."""
    out = {}
    for loss in [x for x in ("wd", "wawd") if x in losses and "mse" in losses]:
        per = compare_at_matched_rate(by_curve, val_pairs, loss, "mse", (loss,))
        out[f"val_{loss}_objective_ratio"] = float(np.median([r[f"{loss}_{loss}"] / r[f"{loss}_mse"]
                                                               for r in per]))
        out[f"val_{loss}_rates_matched"] = float(all(r["bpp_gap"] <= 0.10 for r in per))
    if "mse" in losses:
        out["val_max_hf_ratio_mse"] = float(max(r["hf_ratio"] for name, seed in val_pairs
                                                for r in by_curve[(name, seed, "mse")]))
    return out


def claim_a(by_curve, pairs, losses) -> dict:
    """Matched-rate comparison of each WD-type loss against MSE; medians over (image, seed)."""
    out = {}
    for loss in [x for x in ("wd", "wawd") if x in losses and "mse" in losses]:
        per = compare_at_matched_rate(by_curve, pairs, loss, "mse", ("hf_ratio", "texture_dist", "psnr"))
        hf_w = float(np.median([r[f"hf_ratio_{loss}"] for r in per]))
        hf_m = float(np.median([r["hf_ratio_mse"] for r in per]))
        tex_gain = float(np.median([1 - r[f"texture_dist_{loss}"] / r["texture_dist_mse"] for r in per]))
        matched = all(r["bpp_gap"] <= 0.10 for r in per)
        out[loss] = {"per_pair": per, "hf_ratio": hf_w, "hf_ratio_mse": hf_m,
                     "texture_reduction": tex_gain, "rates_matched": matched,
                     "psnr_drop_db": float(np.median([r["psnr_mse"] - r[f"psnr_{loss}"] for r in per])),
                     "pass": bool(matched and hf_w >= 0.75 and hf_m <= 0.6 and tex_gain >= 0.25)}
    return out


def claim_b(by_curve, pairs, losses) -> dict:
    if not {"wd", "wd_uniform"} <= set(losses):
        return {}
    per = compare_at_matched_rate(by_curve, pairs, "wd", "wd_uniform", ("psnr_salient",))
    gain = float(np.median([r["psnr_salient_wd"] - r["psnr_salient_wd_uniform"] for r in per]))
    matched = all(r["bpp_gap"] <= 0.10 for r in per)
    return {"per_pair": per, "salient_psnr_gain_db": gain, "rates_matched": matched,
            "pass": bool(matched and gain >= 1.0)}


def claim_c(metric_eval: dict) -> dict:
    sp, tex = metric_eval["spearman"], metric_eval["texture"]
    min_wd = min(v for k, v in sp.items() if k.endswith("/wd"))
    min_wawd = min(v for k, v in sp.items() if k.endswith("/wawd"))
    return {"min_spearman_wd": min_wd, "min_spearman_wawd": min_wawd,
            "texture_wd_ratio": tex["wd_ratio"], "texture_wawd_ratio": tex["wawd_ratio"],
            "pass": bool(min_wd >= 0.9 and min_wawd >= 0.9 and tex["wd_ratio"] < 0.5
                         and tex["wawd_ratio"] < 0.5)}


def convergence(fit_logs: dict) -> dict:
    """Relative change of each fit's logged loss over its last fifth (see codec._tail_change)."""
    from components.re2ic.codec import _tail_change
    changes = {f"{item}__{stem}": _tail_change(rec["curve"])
               for item, log in fit_logs.items() for stem, rec in log.items()}
    return {"max_tail_change": max(changes.values()),
            "median_tail_change": float(np.median(list(changes.values()))), "per_fit": changes}


def evaluate_stage(cfg, ctx) -> None:
    torch.set_num_threads(1)
    splits = read_json(ctx.inputs["load_images"] / "images.json")
    split_of = {n: k for k in ("test", "validation") for n in splits[k]}
    fit_logs = {item: read_json(folder / "fit_log.json")
                for item, folder in sorted(ctx.inputs["fit_codec"].items())}
    quality = list(cfg.quality.metrics)
    rows = [{**row, "split": split_of[row["image"]]}
            for item, folder in sorted(ctx.inputs["decode"].items())
            for row in read_json(folder / "decoded.json")]
    write_table(ctx.out_dir / "metrics.parquet", {k: [r[k] for r in rows] for k in rows[0]})
    losses, seeds = sorted({r["loss"] for r in rows}), sorted({r["seed"] for r in rows})
    by_curve = {}
    for r in rows:
        by_curve.setdefault((r["image"], r["seed"], r["loss"]), []).append(r)
    test_pairs = [(n, s) for n in splits["test"] for s in seeds]
    # the validation crops are fitted on the first codec.validation_seeds seeds only
    val_pairs = [(n, s) for n in splits["validation"] for s in seeds if (n, s, "mse") in by_curve]
    c = cfg.codec
    macs = macs_per_pixel(c.latent_levels, c.hidden, c.noise_channels)
    premise = premise_checks(by_curve, val_pairs, losses) if val_pairs else {}
    claims = {"a": claim_a(by_curve, test_pairs, losses), "b": claim_b(by_curve, test_pairs, losses),
              "c": claim_c(read_json(ctx.inputs["metric_eval"] / "metric_eval.json")),
              "d": {"macs_per_pixel": macs, "pass": macs <= 3000,
                    "hific_macs_per_pixel": hific_decoder_macs_per_pixel(),
                    "fraction_of_hific": macs / hific_decoder_macs_per_pixel()}}
    qualities = [("psnr", True), ("wd", False), ("wawd", False), ("texture_dist", False)] + \
        [(name, False) for name in quality]
    bd = {f"{l}_vs_mse_{q}": float(np.nanmedian([bd_rate(by_curve[(n, s, "mse")], by_curve[(n, s, l)], q, hb)
                                                 for n, s in test_pairs]))
          for l in losses if l != "mse" and "mse" in losses for q, hb in qualities}
    test_rows = [r for r in rows if r["split"] == "test"]
    mean_curves = mean_rd_curves(test_rows, [q for q, _ in qualities] + ["hf_ratio"])
    bd_mean = {f"{l}_vs_mse_{q}": bd_rate(mean_curves["mse"], mean_curves[l], q, hb)
               for l in losses if l != "mse" and "mse" in losses for q, hb in qualities}
    conv = convergence(fit_logs)
    set_curves = set_quality_curves(cfg, ctx.inputs, test_rows)
    write_json_atomic(ctx.out_dir / "claims.json", {"premise": premise, "claims": claims,
                                                    "bd_rate_percent": bd, "convergence": conv,
                                                    "mean_rd_curves": mean_curves,
                                                    "bd_rate_mean_curves_percent": bd_mean,
                                                    "set_quality_curves": set_curves})
    panels = ("psnr", "wd", "hf_ratio", "texture_dist", *quality)
    _plot_curves(test_rows, splits["test"][:_MAX_IMAGE_PANELS], losses, panels,
                 ctx.out_dir / "rate_distortion.png")
    _plot_mean_curves(mean_curves, ("psnr", "wd", "wawd", "texture_dist", *quality),
                      ctx.out_dir / "rd_mean_curves.png")
    _plot_fit_curves(fit_logs, ctx.out_dir / "fit_curves.png")
    for name in ("rate_distortion.png", "rd_mean_curves.png", "fit_curves.png"):
        ctx.log_artifact(ctx.out_dir / name)
    summary = {"all_bit_exact": float(all(r["bit_exact"] for r in rows)),
               "mean_bpp": float(np.mean([r["bpp"] for r in test_rows])),
               "min_bpp": float(min(r["bpp"] for r in test_rows)),
               "max_bpp": float(max(r["bpp"] for r in test_rows)),
               "macs_per_pixel": macs,
               "hific_macs_per_pixel": claims["d"]["hific_macs_per_pixel"],
               "macs_fraction_of_hific": claims["d"]["fraction_of_hific"],
               "max_fit_tail_change": conv["max_tail_change"],
               "median_fit_tail_change": conv["median_tail_change"],
               **premise,
               **{f"a_{l}_pass": float(v["pass"]) for l, v in claims["a"].items()},
               **{f"a_{l}_{k}": float(v[k]) for l, v in claims["a"].items()
                  for k in ("hf_ratio", "hf_ratio_mse", "texture_reduction", "rates_matched", "psnr_drop_db")},
               **({"b_pass": float(claims["b"]["pass"]),
                   "b_salient_psnr_gain_db": claims["b"]["salient_psnr_gain_db"],
                   "b_rates_matched": float(claims["b"]["rates_matched"])} if claims["b"] else {}),
               "c_pass": float(claims["c"]["pass"]),
               **{f"c_{k}": float(claims["c"][k]) for k in
                  ("min_spearman_wd", "min_spearman_wawd", "texture_wd_ratio", "texture_wawd_ratio")},
               **{f"mean_{k}_{l}": float(np.mean([r[k] for r in test_rows if r["loss"] == l]))
                  for l in losses for k in ("bpp", "psnr", "hf_ratio", "texture_dist", "wd", "wawd", *quality)},
               **{f"bd_rate_{k}": v for k, v in bd.items()},
               **{f"bd_rate_mean_{k}": v for k, v in bd_mean.items()},
               **{f"mean_{m}_{l}": float(np.mean([p[m] for p in points]))
                  for l, points in set_curves.items() for m in cfg.quality.set_metrics}}
    ctx.write_metrics(summary)


def set_quality_curves(cfg, inputs, test_rows: list[dict]) -> dict[str, list[dict]]:
    """FID / KID (``quality.set_metrics``, paper profile) per loss and lambda: the patches of
    every decoded test image of that point (all images and seeds) against the same patches of
    the originals; one point per lambda at the mean bpp, sorted by rate."""
    if not cfg.quality.set_metrics:
        return {}
    net = PooledVGG(torch.load(cfg.distortion.vgg_weights, map_location="cpu", weights_only=True)).eval()
    crops = dict(np.load(inputs["load_images"] / "images.npz"))
    groups = {}
    for r in test_rows:
        groups.setdefault((r["loss"], r["lam"]), []).append(r)
    curves = {}
    for (loss, lam), group in sorted(groups.items()):
        decoded = [np.load(inputs["decode"][f"{r['loss']}-{r['seed']}"] / f"{r['image']}__lam{lam:g}.npy")
                   for r in group]
        point = set_quality(net, [crops[r["image"]] for r in group], decoded, cfg.quality.patch,
                            cfg.quality.set_metrics)
        curves.setdefault(loss, []).append({"lam": lam, "bpp": float(np.mean([r["bpp"] for r in group])), **point})
    return {loss: sorted(points, key=lambda p: p["bpp"]) for loss, points in curves.items()}


def _plot_fit_curves(fit_logs: dict, path) -> None:
    """Every fit's training loss (log scale), one panel per loss: the convergence evidence."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    by_loss = {}
    for item, log in fit_logs.items():
        by_loss.setdefault(item.rsplit("-", 1)[0], []).extend(rec["curve"] for rec in log.values())
    fig, axes = plt.subplots(1, len(by_loss), figsize=(4 * len(by_loss), 3), squeeze=False)
    for ax, (loss, curves) in zip(axes[0], sorted(by_loss.items())):
        for curve in curves:                     # one line per (crop, lambda, seed)
            ax.plot(curve, lw=0.8)
        ax.set(title=f"{loss}: rate + lambda*D", xlabel="log point", yscale="log")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


_MAX_IMAGE_PANELS = 6      # per-image RD panels drawn (Kodak has 23 test images: see the mean curves)


def mean_rd_curves(rows: list[dict], metrics) -> dict[str, list[dict]]:
    """The usual dataset RD curve: per loss and lambda, bpp and each metric averaged over the
    test images and seeds (one point per lambda), sorted by rate."""
    groups = {}
    for r in rows:
        groups.setdefault((r["loss"], r["lam"]), []).append(r)
    curves = {}
    for (loss, lam), group in sorted(groups.items()):
        curves.setdefault(loss, []).append(
            {"lam": lam, "n": len(group), "bpp": float(np.mean([r["bpp"] for r in group])),
             **{m: float(np.mean([r[m] for r in group])) for m in metrics}})
    return {loss: sorted(points, key=lambda p: p["bpp"]) for loss, points in curves.items()}


def _plot_mean_curves(curves: dict, panels, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3), squeeze=False)
    for ax, metric in zip(axes[0], panels):
        for loss, points in sorted(curves.items()):
            ax.plot([p["bpp"] for p in points], [p[metric] for p in points], "o-", label=loss)
        ax.set(title=f"mean over test images: {metric}", xlabel="bpp (actual bitstream)")
    axes[0, 0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _plot_curves(rows, images, losses, panels, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(len(images), len(panels), figsize=(4 * len(panels), 3 * len(images)),
                             squeeze=False)
    for i, name in enumerate(images):
        for j, metric in enumerate(panels):
            ax = axes[i, j]
            for loss in losses:
                pts = sorted((r["bpp"], r[metric]) for r in rows if r["image"] == name and r["loss"] == loss)
                ax.plot(*zip(*pts), "o", alpha=0.7, label=loss)  # one point per (lambda, seed)
            ax.set(title=f"{name}: {metric}", xlabel="bpp (actual bitstream)")
    axes[0, 0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
