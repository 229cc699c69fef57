"""Feature maps that WD / WA-WD compare: the embedded random conv net, or VGG-16 (the paper's
choice, after C3-WD) loaded from a local state-dict file.

VGG-16 is rebuilt here in plain torch with torchvision's layer layout, so torchvision need not
be importable. Key map: the file is torchvision's ``vgg16`` state dict (``torch.save(
torchvision.models.vgg16(weights="IMAGENET1K_V1").state_dict(), path)``); only
``features.<i>.weight`` / ``features.<i>.bias`` of the first 7 convolutions are read
(i = 0, 2, 5, 7, 10, 12, 14: up to relu3_3); a file of ``vgg.features`` alone (keys
``<i>.weight``) works too. The taps are the pixels and relu1_2, relu2_2, relu3_3.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from components.re2ic.wd import RandomFeatures

# torchvision vgg16 "D" configuration up to relu3_3: channels per conv, "M" = 2x2 max-pool
_VGG16_UP_TO_RELU3_3 = (64, 64, "M", 128, 128, "M", 256, 256, 256)
_TAP_AFTER_CONV = {1: "relu1_2", 3: "relu2_2", 6: "relu3_3"}   # conv ordinal -> tap name
VGG_CONV_INDICES = (0, 2, 5, 7, 10, 12, 14)                      # their index in vgg16.features
_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


class VGG16Features(torch.nn.Module):
    """Pixels + relu1_2, relu2_2, relu3_3 of an ImageNet VGG-16 (frozen)."""

    def __init__(self, state_dict: dict[str, torch.Tensor]) -> None:
        super().__init__()
        prefix = "features." if any(k.startswith("features.") for k in state_dict) else ""
        convs, in_ch = [], 3
        for index, out_ch in zip(VGG_CONV_INDICES, [c for c in _VGG16_UP_TO_RELU3_3 if c != "M"]):
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
        self.register_buffer("mean", torch.tensor(_IMAGENET_MEAN)[None, :, None, None])
        self.register_buffer("std", torch.tensor(_IMAGENET_STD)[None, :, None, None])

    @classmethod
    def from_file(cls, path: str) -> "VGG16Features":
        return cls(torch.load(path, map_location="cpu", weights_only=True))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        h, taps, conv_ordinal = (x - self.mean) / self.std, [x], 0
        for layer in _VGG16_UP_TO_RELU3_3:
            if layer == "M":
                h = F.max_pool2d(h, 2)
                continue
            h = F.relu(self.convs[conv_ordinal](h))
            if conv_ordinal in _TAP_AFTER_CONV:
                taps.append(h)
            conv_ordinal += 1
        return taps


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
