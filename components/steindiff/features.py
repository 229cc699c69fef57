"""The paper profile's feature space for the Fréchet distance: a transformers vision encoder
from a local folder (DINOv2 gives FD-DINOv2, as dgm-eval computes it: the normalised CLS token
of images resized to 224² bicubic with ImageNet normalisation).

Inception FID is not offered: neither clean-fid nor torch-fidelity is installed here and
transformers has no Inception-v3, so the only offline feature network is a transformers one.
Generated samples and reference images go through the same PIL pre-processing.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from components.common.hf_models import load_model, read_config
from components.steindiff.pretrained import reference_images

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class FeatureModel:
    def __init__(self, folder: str, resolution: int, device: torch.device, batch_size: int):
        self.folder, self.resolution = Path(folder).expanduser(), resolution
        self.device, self.batch_size = device, batch_size
        self.model = load_model(self.folder, "encoder", device=str(device), dtype="float32")
        self.name = read_config(self.folder).get("model_type", "encoder")
        self.mean, self.std = _normalisation(self.folder)

    def _pixels(self, images) -> torch.Tensor:
        """uint8 images (H, W, 3) each -> normalised float (B, 3, r, r), PIL bicubic resize."""
        size = (self.resolution, self.resolution)
        resized = np.stack([np.asarray(Image.fromarray(im).resize(size, Image.BICUBIC))
                            for im in images]).astype(np.float32) / 255.0
        x = torch.from_numpy(resized).permute(0, 3, 1, 2)
        mean, std = torch.tensor(self.mean).view(1, -1, 1, 1), torch.tensor(self.std).view(1, -1, 1, 1)
        return ((x - mean) / std).to(self.device)

    @torch.no_grad()
    def features(self, images) -> np.ndarray:
        """Pooled (CLS) features of uint8 images (an array (B, H, W, 3) or a list), in batches,
        as float64."""
        out = []
        for start in range(0, len(images), self.batch_size):
            result = self.model(pixel_values=self._pixels(images[start:start + self.batch_size]))
            pooled = getattr(result, "pooler_output", None)
            pooled = result.last_hidden_state.mean(1) if pooled is None else pooled
            out.append(pooled.float().cpu().numpy().astype(np.float64))
        return np.concatenate(out)


def _normalisation(folder: Path) -> tuple[tuple, tuple]:
    """The processor's mean/std when the folder has a preprocessor config, else ImageNet's."""
    path = folder / "preprocessor_config.json"
    if path.is_file():
        cfg = json.loads(path.read_text())
        return tuple(cfg.get("image_mean", IMAGENET_MEAN)), tuple(cfg.get("image_std", IMAGENET_STD))
    return IMAGENET_MEAN, IMAGENET_STD


def reference_features(model: FeatureModel, folder: Path, limit: int | None) -> np.ndarray:
    """Features of the reference images (sorted paths, up to ``limit``), read a batch at a
    time; their size may differ from the samples', the feature model's resize aligns them."""
    paths = reference_images(folder, limit)
    out = []
    for start in range(0, len(paths), model.batch_size):
        out.append(model.features([_read_rgb(p) for p in paths[start:start + model.batch_size]]))
    return np.concatenate(out)


def _read_rgb(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))
