"""Our MiniLM port vs transformers, and the cached-lower / trainable-upper split."""
import pytest
import torch

from components.caft.minilm import build_upper, encode_lower
from components.common.minilm import load_minilm, model_dir, tokenize

TEXTS = ["the dog in the garden was lovely and great.", "an awful hammer."]


def test_split_forward_equals_full_forward():
    ids, mask = tokenize(TEXTS, 16)
    full = load_minilm().hidden_states(ids, mask)
    upper = build_upper(3, seed=0).eval()
    with torch.no_grad():
        res = upper.residuals(encode_lower(ids, mask, upto=2), mask)
    for layer in (3, 4, 5):
        torch.testing.assert_close(res[layer], full[layer], atol=1e-5, rtol=0)


def test_matches_transformers_bert():
    transformers = pytest.importorskip("transformers")
    ids, mask = tokenize(TEXTS, 16)
    ref = transformers.BertModel.from_pretrained(str(model_dir())).eval()
    with torch.no_grad():
        ref_h = ref(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        ours = load_minilm().hidden_states(ids, mask)
    keep = mask.bool()
    for layer in range(6):
        torch.testing.assert_close(ours[layer][keep], ref_h[layer + 1][keep], atol=1e-4, rtol=0)
