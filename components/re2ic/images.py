"""Test crops from the photos bundled with scikit-image / scikit-learn, and the
saliency-driven region partition and sigma maps."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from scipy import ndimage

from components.common.io import write_json_atomic

# name -> loader of a bundled (never downloaded) RGB photo, uint8 HxWx3
def _skimage(name):
    def load():
        import skimage.data
        return getattr(skimage.data, name)()
    return load


def _sklearn(name):
    def load():
        from sklearn.datasets import load_sample_image
        return load_sample_image(name)
    return load


SOURCES = {
    "astronaut": _skimage("astronaut"), "coffee": _skimage("coffee"),
    "chelsea": _skimage("chelsea"), "rocket": _skimage("rocket"),
    "china": _sklearn("china.jpg"), "flower": _sklearn("flower.jpg"),
}


def load_crop(name: str, top: int, left: int, size: int) -> np.ndarray:
    """A size x size crop of a bundled photo at (top, left). An origin that would make the
    crop leave the photo is moved inwards (so any spec works at any size that fits, e.g. the
    512^2 astronaut); a photo smaller than size is an error."""
    image = np.asarray(SOURCES[name]())[..., :3]
    h, w = image.shape[:2]
    if size > min(h, w):
        raise ValueError(f"no {size}x{size} crop fits the {h}x{w} photo {name!r} "
                         f"(images.size must be <= {min(h, w)})")
    top, left = min(max(top, 0), h - size), min(max(left, 0), w - size)
    return image[top:top + size, left:left + size].astype(np.float32) / 255.0


def parse_crop(spec: str) -> tuple[str, int, int]:
    name, top, left = spec.split(":")
    return name, int(top), int(left)


def crop_id(spec: str) -> str:
    """"china:200:300" -> "china_200_300" (a file- and key-safe name)."""
    return spec.replace(":", "_")


def load_folder_image(path: Path, size: int) -> np.ndarray:
    """An RGB image file: the centre size x size crop, or (size 0) the whole image trimmed to
    multiples of 16 (the region blocks and the Haar transform need even block-aligned sides)."""
    from PIL import Image
    rgb = np.asarray(Image.open(path).convert("RGB"), dtype=np.float32) / 255.0
    h, w = rgb.shape[:2]
    th, tw = (size, size) if size else (h - h % 16, w - w % 16)
    if th > h or tw > w or th == 0 or tw == 0:
        raise ValueError(f"{path}: a {th}x{tw} crop does not fit the {h}x{w} image (images.size)")
    top, left = (h - th) // 2, (w - tw) // 2
    return rgb[top:top + th, left:left + tw]


def _bundled_splits(im) -> tuple[dict, dict]:
    splits = {"test": list(im.crops), "validation": list(im.validation_crops)}
    crops = {crop_id(spec): load_crop(*parse_crop(spec), im.size)
             for specs in splits.values() for spec in specs}
    return crops, {k: [crop_id(s) for s in v] for k, v in splits.items()}


def _folder_splits(im) -> tuple[dict, dict]:
    files = sorted(Path(im.root).expanduser().glob(im.pattern))
    crops = {f.stem: load_folder_image(f, im.size) for f in files}
    validation = [Path(n).stem for n in im.validation_files]
    return crops, {"test": [n for n in crops if n not in validation], "validation": validation}


def load_images_stage(cfg, ctx) -> None:
    """Test images and validation images (the latter only for calibration and premise
    checks): bundled photo crops (embedded profiles) or a user's folder (paper: Kodak, CLIC)."""
    im = cfg.images
    crops, splits = (_folder_splits if im.source == "folder" else _bundled_splits)(im)
    if len(crops) != sum(map(len, splits.values())) or not splits["test"]:
        raise ValueError(f"images must be distinct and include test images: {splits}")
    np.savez(ctx.out_dir / "images.npz", **crops)
    write_json_atomic(ctx.out_dir / "images.json", {"size": im.size, **splits})
    ctx.write_metrics({"n_images": len(crops), "n_validation": len(splits["validation"]),
                       "size": im.size})


def spectral_residual_saliency(rgb: np.ndarray, blur: float) -> np.ndarray:
    """Hou & Zhang (2007): the log-amplitude spectrum minus its local average marks the
    'unexpected' frequencies; transforming back with the original phase highlights them."""
    gray = rgb.mean(-1)
    spectrum = np.fft.fft2(gray)
    log_amp, phase = np.log(np.abs(spectrum) + 1e-8), np.angle(spectrum)
    residual = log_amp - ndimage.uniform_filter(log_amp, size=3, mode="wrap")
    sal = np.abs(np.fft.ifft2(np.exp(residual + 1j * phase))) ** 2
    sal = ndimage.gaussian_filter(sal, blur)
    return ((sal - sal.min()) / (np.ptp(sal) + 1e-12)).astype(np.float32)


def region_blocks(saliency: np.ndarray, block: int, salient_fraction: float) -> np.ndarray:
    """Partition into 2 regions on a block grid (what the decoder receives): 1 = salient."""
    h, w = saliency.shape
    means = saliency.reshape(h // block, block, w // block, block).mean((1, 3))
    return (means >= np.quantile(means, 1 - salient_fraction)).astype(np.uint8)


def blocks_to_pixels(blocks: np.ndarray, block: int) -> np.ndarray:
    return np.kron(blocks, np.ones((block, block), dtype=blocks.dtype))


def log2_sigma_map(region_pixels: np.ndarray, salient: float, background: float,
                   smooth: float) -> np.ndarray:
    """Small sigma (fidelity) where people look, large sigma (realism) elsewhere."""
    raw = np.where(region_pixels > 0, salient, background).astype(np.float32)
    return ndimage.gaussian_filter(raw, smooth).astype(np.float32)


def saliency_stage(cfg, ctx) -> None:
    crops = dict(np.load(ctx.inputs["load_images"] / "images.npz"))
    r = cfg.regions
    out = {}
    for name, rgb in crops.items():
        sal = spectral_residual_saliency(rgb, r.blur)
        blocks = region_blocks(sal, r.block, r.salient_fraction)
        pixels = blocks_to_pixels(blocks, r.block)
        out[f"{name}/saliency"] = sal
        out[f"{name}/blocks"] = blocks
        out[f"{name}/log2_sigma"] = log2_sigma_map(pixels, r.log2_sigma_salient,
                                                   r.log2_sigma_background, r.sigma_smooth)
        out[f"{name}/log2_sigma_uniform"] = np.full_like(sal, r.log2_sigma_background)
    np.savez(ctx.out_dir / "regions.npz", **out)
    fractions = [float(out[f"{n}/blocks"].mean()) for n in crops]
    ctx.write_metrics({"mean_salient_fraction": float(np.mean(fractions))})
