"""Feature maps that WD / WA-WD compare: the embedded random conv net, or VGG-16 (the paper's
choice, after C3-WD) loaded from a local state-dict file.

VGG-16 is rebuilt here in plain torch with torchvision's layer layout, so torchvision need not
be importable. Key map: the file is torchvision's ``vgg16`` state dict (``torch.save(
torchvision.models.vgg16(weights="IMAGENET1K_V1").state_dict(), path)``); only
``features.<i>.weight`` / ``features.<i>.bias`` of the convolutions are read (i = 0, 2, 5, 7,
10, 12, 14 up to relu3_3 for WD; and 17, 19, 21, 24, 26, 28 up to relu5_3 for LPIPS / DISTS,
see ``perceptual.py``); a file of ``vgg.features`` alone (keys ``<i>.weight``) works too.
The WD taps are the pixels and relu1_2, relu2_2, relu3_3.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from components.re2ic.wd import RandomFeatures

# torchvision vgg16 "D" configuration: output channels per conv, "M" = 2x2 max-pool
VGG16_LAYOUT = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512)
VGG16_CHANNELS = tuple(c for c in VGG16_LAYOUT if c != "M")
# index of each conv in torchvision's vgg16.features (conv, relu[, pool] per entry)
VGG16_CONV_INDICES = (0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28)
VGG_CONV_INDICES = VGG16_CONV_INDICES[:7]                     # up to relu3_3 (what WD reads)
BLOCK_TAPS = ("relu1_2", "relu2_2", "relu3_3", "relu4_3", "relu5_3")  # last relu of each block
_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


class L2Pool(torch.nn.Module):
    """DISTS's replacement of VGG's max-pools (Ding et al. 2020): sqrt of a 3x3 Hann-weighted
    (np.hanning(5)[1:-1] outer itself, normalised) average of x^2, stride 2, padding 1."""

    def __init__(self) -> None:
        super().__init__()
        a = torch.from_numpy(np.hanning(5)[1:-1]).float()
        g = torch.outer(a, a)
        self.register_buffer("filter", (g / g.sum())[None, None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.conv2d(x.square(), self.filter.expand(x.shape[1], 1, 3, 3), stride=2, padding=1,
                       groups=x.shape[1])
        return (out + 1e-12).sqrt()


class VGG16Trunk(torch.nn.Module):
    """The first ``n_convs`` convolutions of torchvision's VGG-16 (frozen), returning the
    activation after the last ReLU of every block reached (relu1_2, relu2_2, ...). The input
    is whatever the caller normalised; ``pool="l2"`` swaps the max-pools for DISTS's L2Pool."""

    def __init__(self, state_dict: dict[str, torch.Tensor], n_convs: int = 13, pool: str = "max") -> None:
        super().__init__()
        prefix = "features." if any(k.startswith("features.") for k in state_dict) else ""
        convs, in_ch = [], 3
        for index, out_ch in zip(VGG16_CONV_INDICES[:n_convs], VGG16_CHANNELS[:n_convs]):
            conv = torch.nn.Conv2d(in_ch, out_ch, 3, padding=1)
            w, b = state_dict.get(f"{prefix}{index}.weight"), state_dict.get(f"{prefix}{index}.bias")
            if w is None or b is None or tuple(w.shape) != tuple(conv.weight.shape):
                raise ValueError(f"VGG-16 state dict: {prefix}{index}.weight/bias missing or not "
                                 f"{tuple(conv.weight.shape)} (expected torchvision's vgg16 keys)")
            with torch.no_grad():
                conv.weight.copy_(w)
                conv.bias.copy_(b)
            convs.append(conv.requires_grad_(False))
            in_ch = out_ch
        self.convs = torch.nn.ModuleList(convs)
        self.pool = L2Pool() if pool == "l2" else None
        # layout entries up to the last conv built
        self.layout = VGG16_LAYOUT[:[i for i, c in enumerate(VGG16_LAYOUT) if c != "M"][n_convs - 1] + 1]

    def forward(self, h: torch.Tensor) -> list[torch.Tensor]:
        taps, ordinal = [], 0
        for i, layer in enumerate(self.layout):
            if layer == "M":
                h = self.pool(h) if self.pool is not None else F.max_pool2d(h, 2)
                continue
            h = F.relu(self.convs[ordinal](h))
            ordinal += 1
            if i + 1 == len(self.layout) or self.layout[i + 1] == "M":
                taps.append(h)
        return taps


class VGG16Features(torch.nn.Module):
    """Pixels + relu1_2, relu2_2, relu3_3 of an ImageNet VGG-16 (frozen), input in [0, 1]
    normalised with ImageNet's mean and std as torchvision's weights expect."""

    def __init__(self, state_dict: dict[str, torch.Tensor]) -> None:
        super().__init__()
        self.trunk = VGG16Trunk(state_dict, n_convs=len(VGG_CONV_INDICES))
        self.register_buffer("mean", torch.tensor(_IMAGENET_MEAN)[None, :, None, None])
        self.register_buffer("std", torch.tensor(_IMAGENET_STD)[None, :, None, None])

    @classmethod
    def from_file(cls, path: str) -> "VGG16Features":
        return cls(torch.load(path, map_location="cpu", weights_only=True))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [x] + self.trunk((x - self.mean) / self.std)


_CACHE: dict[tuple, torch.nn.Module] = {}


def make_features(dcfg) -> torch.nn.Module:
    """The feature network named by the distortion config (built once per process)."""
    key = (dcfg.features, dcfg.vgg_weights, dcfg.feature_seed, dcfg.feature_width)
    if key not in _CACHE:
        if dcfg.features == "vgg16":
            _CACHE[key] = VGG16Features.from_file(dcfg.vgg_weights)
        elif dcfg.features == "random":
            _CACHE[key] = RandomFeatures(dcfg.feature_seed, dcfg.feature_width)
        else:
            raise ValueError(f"distortion.features must be random or vgg16, got {dcfg.features!r}")
    return _CACHE[key]
