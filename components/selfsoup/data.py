"""Embedded data: a natural-image source for the stock, sklearn's digits as the downstream task,
and locally-made corruptions of the digits test split.

Images are float32 in [0, 1], shape (N, 1, S, S). The stock is pre-trained on grey crops of the
photographs bundled with scikit-image (no digit, no glyph in them): a source disjoint from and
shifted against the downstream task, like ImageNet against VTAB in the paper. Corruptions follow
the ImageNet-C recipes (noise, blur, contrast, brightness, pixelate, elastic) with severities 1-5,
re-scaled for 16 px greys.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from scipy.ndimage import gaussian_filter, map_coordinates

from components.common.io import load_torch, save_torch, write_json_atomic

# severity 1..5 -> strength, per corruption (ImageNet-C-like spacing)
SEVERITY = {
    "gaussian_noise": [0.08, 0.12, 0.18, 0.26, 0.38],   # noise std
    "shot_noise": [60, 25, 12, 5, 3],                  # photons per unit intensity
    "impulse_noise": [0.03, 0.06, 0.09, 0.17, 0.27],   # fraction of salt-and-pepper pixels
    "gaussian_blur": [0.4, 0.6, 0.8, 1.0, 1.5],        # blur sigma (pixels)
    "contrast": [0.4, 0.3, 0.2, 0.1, 0.05],            # contrast kept
    "brightness": [0.1, 0.2, 0.3, 0.4, 0.5],           # added intensity
    "pixelate": [0.75, 0.5, 0.4, 0.3, 0.25],           # resolution kept
    "elastic": [0.4, 0.6, 0.8, 1.0, 1.3],              # displacement std (pixels)
}
ELASTIC_SMOOTHING = 2.0  # sigma (pixels) of the Gaussian that makes the displacement field smooth

# photographs bundled with scikit-image (loaded offline); text.png / page.png are left out on
# purpose: printed glyphs would make the source too close to digits
SOURCE_PHOTOS = ["camera", "astronaut", "coffee", "chelsea", "coins", "moon", "rocket", "brick",
                 "grass", "gravel", "hubble_deep_field", "cell"]


def corrupt(images: np.ndarray, name: str, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Corrupt (N, 1, S, S) images in [0, 1]; the result is clipped back to [0, 1]."""
    c = SEVERITY[name][severity - 1]
    x = images.astype(np.float64)
    if name == "gaussian_noise":
        x = x + rng.normal(0.0, c, size=x.shape)
    elif name == "shot_noise":
        x = rng.poisson(x * c) / c
    elif name == "impulse_noise":
        hit = rng.random(x.shape) < c
        x = np.where(hit, rng.integers(0, 2, size=x.shape).astype(np.float64), x)
    elif name == "gaussian_blur":
        x = gaussian_filter(x, sigma=(0, 0, c, c))
    elif name == "contrast":
        mean = x.mean(axis=(1, 2, 3), keepdims=True)
        x = (x - mean) * c + mean
    elif name == "brightness":
        x = x + c
    elif name == "elastic":
        x = elastic(x, c, ELASTIC_SMOOTHING, rng)
    elif name == "pixelate":
        size = x.shape[-1]
        small = max(1, int(round(size * c)))
        t = torch.from_numpy(x)
        t = F.interpolate(F.adaptive_avg_pool2d(t, small), size=(size, size), mode="nearest")
        x = t.numpy()
    else:
        raise ValueError(f"unknown corruption {name!r}; known: {', '.join(SEVERITY)}")
    return np.clip(x, 0.0, 1.0).astype(np.float32)


def smooth_field(shape: tuple[int, int], sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Gaussian-smoothed white noise, rescaled to unit standard deviation."""
    field = gaussian_filter(rng.normal(size=shape), sigma, mode="wrap")
    return field / field.std()


def elastic(images: np.ndarray, amplitude: float, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """Warp each image by its own smooth random displacement field of std ``amplitude`` pixels
    (bilinear resampling, edges repeated), as ImageNet-C's elastic transform does at 224 px."""
    out = np.empty_like(images)
    size = images.shape[-2:]
    rows, cols = np.meshgrid(np.arange(size[0]), np.arange(size[1]), indexing="ij")
    for i in range(images.shape[0]):
        dy, dx = (amplitude * smooth_field(size, sigma, rng) for _ in range(2))
        coords = [rows + dy, cols + dx]
        for ch in range(images.shape[1]):
            out[i, ch] = map_coordinates(images[i, ch], coords, order=1, mode="nearest")
    return out


def natural_crops(n: int, image_size: int, side_range: tuple[int, int], seed: int,
                  photos: list[str] = SOURCE_PHOTOS) -> np.ndarray:
    """n random square grey crops (side in pixels drawn from side_range) of the bundled photographs,
    area-downsampled to image_size, each photo equally often, scaled to [0, 1]."""
    import skimage.data
    from skimage.color import rgb2gray

    rng = np.random.default_rng(seed)
    greys = []
    for name in photos:
        img = np.asarray(getattr(skimage.data, name)())
        grey = rgb2gray(img) if img.ndim == 3 else img.astype(np.float64) / 255.0
        greys.append(torch.from_numpy(np.asarray(grey, dtype=np.float32)))
    crops = []
    for i in range(n):
        grey = greys[i % len(greys)]
        side = int(rng.integers(side_range[0], side_range[1] + 1))
        top = int(rng.integers(0, grey.shape[0] - side + 1))
        left = int(rng.integers(0, grey.shape[1] - side + 1))
        crop = grey[top:top + side, left:left + side][None, None]
        crops.append(F.adaptive_avg_pool2d(crop, image_size)[0])
    return torch.stack(crops).clamp(0, 1).numpy()


def load_digits_images(image_size: int) -> tuple[np.ndarray, np.ndarray]:
    """sklearn's bundled 8x8 digits, bilinearly upsampled to image_size, scaled to [0, 1]."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.from_numpy(digits.images.astype(np.float32) / 16.0).unsqueeze(1)
    x = F.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    return x.clamp(0, 1).numpy(), digits.target.astype(np.int64)


def split_indices(n: int, sizes: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Disjoint random splits of the given sizes; 'test' takes the rest."""
    perm = np.random.default_rng(seed).permutation(n)
    out, start = {}, 0
    for name, size in sizes.items():
        out[name] = perm[start:start + size]
        start += size
    out["test"] = perm[start:]
    return out


def prepare_paper_data(d, out_dir) -> dict[str, int]:
    """The paper's task and its corruptions from disk (paper_data.py), saved like the digits'."""
    from components.selfsoup.paper_data import load_corrupted_sets, load_paper_splits

    splits, classes = load_paper_splits(d)
    save_torch(out_dir / "splits.pt", splits)
    names = [f"{c}_{v}" for c in d.corruptions for v in d.severities]
    names += [n for n in (f"{c}_{d.shift_severity}" for c in d.shift_corruptions) if n not in names]
    corrupted = load_corrupted_sets(d, classes, names)
    save_torch(out_dir / "corrupted_test.pt", corrupted)
    sizes = {name: len(split["y"]) for name, split in splits.items()}
    write_json_atomic(out_dir / "summary.json", {"sizes": sizes, "classes": classes, "corrupted_sets":
                                                 {k: len(v["y"]) for k, v in corrupted.items()}})
    return sizes | {"corrupted_sets": len(corrupted), "classes": len(classes)}


def prepare_data_stage(cfg, ctx) -> None:
    d = cfg.data
    if d.source != "digits":
        counts = prepare_paper_data(d, ctx.out_dir)
        ctx.write_metrics({f"n_{name}": n for name, n in counts.items()})
        return
    images, labels = load_digits_images(d.image_size)
    idx = split_indices(len(images), {"train": d.n_train, "val": d.n_val}, d.split_seed)
    splits = {name: {"x": torch.from_numpy(images[i]), "y": torch.from_numpy(labels[i])} for name, i in idx.items()}
    # the stock's pre-training source: no labels, no digits
    source = natural_crops(d.n_source, d.image_size, tuple(d.source_crop_sides), d.source_seed)
    splits["source"] = {"x": torch.from_numpy(source)}
    save_torch(ctx.out_dir / "splits.pt", splits)

    rng = np.random.default_rng(d.corruption_seed)
    test = images[idx["test"]]
    corrupted = {f"{name}_{sev}": torch.from_numpy(corrupt(test, name, sev, rng))
                 for name in d.corruptions for sev in d.severities}
    for name in d.shift_corruptions:  # the robustness arm needs these whatever the eval grid
        key = f"{name}_{d.shift_severity}"
        if key not in corrupted:
            corrupted[key] = torch.from_numpy(corrupt(test, name, d.shift_severity, rng))
    save_torch(ctx.out_dir / "corrupted_test.pt", corrupted)
    sizes = {name: len(i) for name, i in idx.items()} | {"source": len(source)}
    write_json_atomic(ctx.out_dir / "summary.json", {"sizes": sizes, "corrupted_sets": sorted(corrupted)})
    ctx.write_metrics({f"n_{name}": n for name, n in sizes.items()} | {"n_corrupted_sets": len(corrupted)})


def member_dir(stage_inputs: dict, seed: int, name: str):
    """Folder of one model inside a per-seed instance: inter_train, inter_train_shift and
    fine_tune run every ingredient / model of a seed in one stage instance (each instance costs
    runtime overhead; v3 had 57 of them for these three stages)."""
    return stage_inputs[str(seed)] / name


def load_splits(data_dir) -> dict:
    return load_torch(data_dir / "splits.pt")


def load_corrupted(data_dir) -> dict[str, torch.Tensor]:
    return load_torch(data_dir / "corrupted_test.pt")


def downstream_unlabelled(splits: dict) -> torch.Tensor:
    """The downstream task's train + val images without their labels: what the clean SSL
    ingredients are inter-trained on (as the official code inter-trains on the task's images)."""
    return torch.cat([splits["train"]["x"], splits["val"]["x"]])


def corrupted_set(entry, test_labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(images, labels) of one corrupted set: the digits' sets are the test split's images
    corrupted in place (its labels); the paper's come from disk with their own labels."""
    return (entry["x"], entry["y"]) if isinstance(entry, dict) else (entry, test_labels)


def shift_pool(data_dir, data_cfg) -> torch.Tensor:
    """Unlabelled corrupted test images that the robustness arm adapts to (transductive)."""
    corrupted = load_corrupted(data_dir)
    sets = [corrupted[f"{name}_{data_cfg.shift_severity}"] for name in data_cfg.shift_corruptions]
    return torch.cat([s["x"] if isinstance(s, dict) else s for s in sets])


def as_float(x: torch.Tensor) -> torch.Tensor:
    """[0, 1] floats; the paper's images are stored as uint8."""
    return x if x.is_floating_point() else x.float() / 255.0


def augment(x: torch.Tensor, aug, generator: torch.Generator | None = None) -> torch.Tensor:
    """Random resized crop + small rotation (one affine warp per image), then pixel noise.
    Random numbers are drawn on the CPU whatever the device of ``x``."""
    x = as_float(x)
    b = x.shape[0]
    lo, hi = aug.crop_scale

    def uniform(low, high):
        return low + (high - low) * torch.rand(b, generator=generator)

    scale = uniform(lo, hi).sqrt()                       # side fraction of the crop
    angle = uniform(-aug.rotation_deg, aug.rotation_deg) * math.pi / 180
    shift = (1 - scale).unsqueeze(1) * (2 * torch.rand(b, 2, generator=generator) - 1)
    cos, sin = torch.cos(angle) * scale, torch.sin(angle) * scale
    theta = torch.stack([torch.stack([cos, -sin, shift[:, 0]], 1), torch.stack([sin, cos, shift[:, 1]], 1)], 1)
    grid = F.affine_grid(theta.to(x.device), list(x.shape), align_corners=False)
    out = F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    if aug.noise_std > 0:
        out = out + aug.noise_std * torch.randn(out.shape, generator=generator).to(x.device)
    return out.clamp(0, 1)


def batches(n: int, batch: int, generator: torch.Generator):
    """Endless random index batches (reshuffled each epoch, last partial batch dropped)."""
    batch = min(batch, n)
    while True:
        perm = torch.randperm(n, generator=generator)
        for start in range(0, n - batch + 1, batch):
            yield perm[start:start + batch]
