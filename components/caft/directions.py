"""The paper's direction finder: PCA of how standard fine-tuning moved the residual stream.

Both the base and the standard-fine-tuned model read the same prompts; the per-token activation
differences ft - base at a layer are centred and their top principal components are candidate
concept directions. The small profile no longer uses it (its 2026-11-30 run showed that the
PCs it selected left sentiment fully decodable; see CLAIMS.md History): the subspace is chosen
on the probe set instead (``subspace.py``). Kept, with its test, for the paper profile.
"""
from __future__ import annotations

import torch

from components.caft.minilm import UpperClassifier


@torch.no_grad()
def residuals_at(model: UpperClassifier, split: dict, layers: list[int], batch: int = 256
                 ) -> dict[int, torch.Tensor]:
    """Residual vectors of real (non-pad) tokens at each layer: {layer: [n_tokens, d]}."""
    model.eval()
    out = {layer: [] for layer in layers}
    for i in range(0, len(split["h"]), batch):
        mask = split["mask"][i:i + batch]
        res = model.residuals(split["h"][i:i + batch], mask)
        for layer in layers:
            out[layer].append(res[layer][mask])
    return {layer: torch.cat(chunks) for layer, chunks in out.items()}


def pca(x: torch.Tensor, n: int) -> dict[str, torch.Tensor]:
    """Top-n principal components of the rows of x (exact SVD, in float64).
    Returns pcs [n, d] (unit rows, sign fixed so the largest |entry| is positive),
    explained-variance ratios [n] and the mean [d]."""
    x = x.double()
    mean = x.mean(0)
    _, s, vt = torch.linalg.svd(x - mean, full_matrices=False)
    pcs = vt[:n]
    signs = torch.sign(pcs.gather(1, pcs.abs().argmax(1, keepdim=True)))
    var = s**2
    return {"pcs": (pcs * signs).float(), "var_ratio": (var[:n] / var.sum()).float(), "mean": mean.float()}
