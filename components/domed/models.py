"""Networks: a ~43k-parameter CNN for the digit benchmarks (teachers, students and baselines
alike), or, in the paper profile, a transformers ResNet from a local folder (``domainbed``)."""
from __future__ import annotations

import torch
from torch import nn


class SmallCNN(nn.Module):
    """Two stride-2 conv layers then one hidden FC layer. Strided convs instead of max-pooling:
    ~7x faster on one CPU thread at the same width, which is what lets the small profile fit."""

    def __init__(self, n_classes: int = 10, width: int = 32, hidden: int = 64, image_size: int = 16):
        super().__init__()
        side = image_size // 4
        self.net = nn.Sequential(
            nn.Conv2d(1, width, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride=2, padding=1), nn.ReLU(),
            nn.Flatten(), nn.Linear(width * side * side, hidden), nn.ReLU(),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def make_model(model_cfg, image_size: int, n_classes: int = 10) -> nn.Module:
    if model_cfg.arch == "small_cnn":
        return SmallCNN(n_classes, model_cfg.width, model_cfg.hidden, image_size)
    if model_cfg.arch == "resnet":
        from components.domed.domainbed import ResNetClassifier

        return ResNetClassifier(model_cfg.backbone_path, n_classes, model_cfg.device)
    raise ValueError(f"unknown arch {model_cfg.arch!r}")


@torch.no_grad()
def predict_logits(model: nn.Module, x, batch_size: int = 1024) -> torch.Tensor:
    """Logits (CPU) of every row of ``x``: an array, a tensor or ``ImageFiles``."""
    from components.domed.data import take

    model.eval()
    if isinstance(x, torch.Tensor):
        x = x.numpy()
    return torch.cat([model(take(x, slice(i, i + batch_size))) for i in range(0, len(x), batch_size)])
