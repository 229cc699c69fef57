"""Concept directions from sparse-autoencoder files (the paper profile's direction source).

The paper's SAE variant ablates the decoder directions of the latents a human judged to encode
the unwanted concept. Two published on-disk formats are read from local files (no download):

- Gemma Scope (``google/gemma-scope-2b-pt-res``): ``layer_<L>/width_<W>/average_l0_<N>/params.npz``
  with ``W_enc [d_model, d_sae]``, ``W_dec [d_sae, d_model]``, ``b_enc``, ``b_dec``, ``threshold``.
- dictionary_learning (the batch-top-k SAEs of ``adamkarvonen/qwen_coder_32b_saes``): ``ae.pt``,
  a state dict whose ``decoder.weight`` is ``[d_model, d_sae]``.

Either way a latent's direction is its decoder row; ``ablation.orthonormal_basis`` turns the
chosen rows into the projection (decoder rows are not orthogonal).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from components.common.readers import DatasetError, read_npz

SAE_LAYOUT = ("a Gemma Scope params.npz (W_dec [d_sae, d_model]) or a dictionary_learning ae.pt "
              "(decoder.weight [d_model, d_sae])")


def decoder_rows(path: str | Path) -> torch.Tensor:
    """All decoder directions of one SAE file, ``[d_sae, d_model]`` float32."""
    path = Path(path).expanduser()
    if path.suffix == ".npz":
        return torch.from_numpy(np.asarray(read_npz(str(path), {"W_dec": 2})["W_dec"], dtype=np.float32))
    if path.suffix in (".pt", ".pth"):
        state = torch.load(path, map_location="cpu", weights_only=True)
        if "decoder.weight" not in state or state["decoder.weight"].ndim != 2:
            raise DatasetError(f"{path}: no 2-d 'decoder.weight' (expected {SAE_LAYOUT})")
        return state["decoder.weight"].T.float().contiguous()
    raise DatasetError(f"{path}: unknown SAE file type (expected {SAE_LAYOUT})")


def sae_directions(files: dict[int, str], latents: dict[int, list[int]], d_model: int
                   ) -> dict[int, torch.Tensor]:
    """layer -> the chosen latents' decoder rows ``[k, d_model]``, in the order given."""
    out = {}
    for layer, ids in sorted(latents.items()):
        rows = decoder_rows(files[layer])
        if rows.shape[1] != d_model:
            raise DatasetError(f"{files[layer]}: SAE width d_model={rows.shape[1]}, the model's is {d_model}")
        bad = [i for i in ids if not 0 <= i < len(rows)]
        if bad:
            raise DatasetError(f"{files[layer]}: latent ids {bad} out of range (d_sae={len(rows)})")
        out[layer] = rows[torch.tensor(ids, dtype=torch.long)]
    return out
