"""The tiny-checkpoint factory covers every family, each a few MB, built in seconds, and each
folder loads back through components.common.hf_models to the same weights."""
import time

import pytest
import torch

from components.common.hf_models import check_checkpoint, load_model, load_tokenizer
from components.common.tiny_models import build_tiny
from tests.paper.checkpoints import WITH_TOKENIZER

FAMILIES = ["qwen3", "gemma2", "llama", "llava", "qwen2_vl", "vit_mae", "clip_vision", "clip", "dinov2",
            "resnet", "esm", "unet2d", "vae"]


def test_factory_lists_every_family_the_paper_profiles_use(tiny_checkpoints):
    assert set(FAMILIES) <= set(tiny_checkpoints.families())


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_checkpoint_is_small_fast_and_round_trips(tiny_checkpoints, family):
    start = time.perf_counter()
    folder = tiny_checkpoints.checkpoint(family)
    seconds = time.perf_counter() - start
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert size < 5e6, f"{family}: {size / 1e6:.1f} MB"
    assert seconds < 20, f"{family}: built in {seconds:.1f}s"
    assert tiny_checkpoints.checkpoint(family) == folder          # cached for the session
    assert check_checkpoint(folder) == ("diffusers" if family in ("unet2d", "vae") else "transformers")

    loaded = load_model(folder, tiny_checkpoints.kind(family), device="cpu")
    fresh = build_tiny(family)                                   # same seed -> the saved weights
    ref, got = fresh.state_dict(), loaded.state_dict()
    assert ref.keys() == got.keys()
    assert all(torch.equal(ref[k], got[k]) for k in ref)
    if family in WITH_TOKENIZER:
        tok = load_tokenizer(folder)
        assert len(tok) <= loaded.get_input_embeddings().num_embeddings
