"""Retrieval models from a local folder (components/common/text_encoder.py) on a tiny random
Qwen3 saved with save_pretrained: last-token pooling picks the last real token whatever the
padding, vectors are unit-norm, the instruction goes on queries only, and the yes/no reranker's
score is the next-token probability of "yes" against "no"."""
import numpy as np
import pytest
import torch

from components.common.text_encoder import HFTextEncoder, HFYesNoReranker, instructed, pool

TEXTS = ["the dog", "a small bird reads a long book in the morning", "my friend"]


def _last_state(enc: HFTextEncoder, text: str) -> np.ndarray:
    """The reference: the text alone (no padding), the final position's hidden state, L2-normed."""
    ids = enc.tok(text, return_tensors="pt")
    with torch.no_grad():
        h = enc.model(**ids).last_hidden_state[0, -1]
    return (h / h.norm()).numpy()


@pytest.mark.parametrize("side", ["left", "right"])
def test_last_token_pooling_is_padding_invariant_and_unit_norm(tiny_checkpoints, side):
    enc = HFTextEncoder(tiny_checkpoints.checkpoint("qwen3"), pooling="last", device="cpu")
    enc.tok.padding_side = side
    v = enc.encode(TEXTS)                             # one padded batch: texts of different lengths
    assert v.shape == (3, enc.dim) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    for text, row in zip(TEXTS, v):
        np.testing.assert_allclose(row, _last_state(enc, text), atol=1e-5)


def test_instruction_goes_on_queries_only_unless_documents_too(tiny_checkpoints):
    folder = tiny_checkpoints.checkpoint("qwen3")
    enc = HFTextEncoder(folder, instruction="find similar consultations", device="cpu")
    q, d = enc.encode(["the dog"], query=True)[0], enc.encode(["the dog"])[0]
    np.testing.assert_allclose(q, _last_state(enc, instructed("find similar consultations", "the dog")), atol=1e-5)
    np.testing.assert_allclose(d, _last_state(enc, "the dog"), atol=1e-5)
    assert instructed("t", "x") == "Instruct: t\nQuery:x"          # Qwen3-Embedding's query format
    both = HFTextEncoder(folder, instruction="find similar consultations", instruct_documents=True, device="cpu")
    np.testing.assert_allclose(both.encode(["the dog"])[0], q, atol=1e-5)


def test_mean_and_cls_pooling():
    h = torch.arange(12, dtype=torch.float32).view(1, 4, 3)
    mask = torch.tensor([[0, 1, 1, 0]])
    assert pool(h, mask, "last").tolist() == [[6.0, 7.0, 8.0]]
    assert pool(h, mask, "mean").tolist() == [[4.5, 5.5, 6.5]]
    assert pool(h, mask, "cls").tolist() == [[0.0, 1.0, 2.0]]
    with pytest.raises(ValueError, match="unknown pooling"):
        pool(h, mask, "max")


def test_yes_no_reranker_scores_the_next_token(tiny_checkpoints):
    folder = tiny_checkpoints.checkpoint("qwen3")
    # the toy vocabulary has no "yes"/"no": two of its words stand in for them
    rr = HFYesNoReranker(folder, instruction="rank", device="cpu", yes="Ġdog", no="cat")
    docs = ["the dog", "a small bird reads a long book", "my friend"]
    scores = rr.score("the river", docs)
    assert scores.shape == (3,) and ((scores > 0) & (scores < 1)).all()
    for doc, s in zip(docs, scores):
        ids = rr.tok(rr.prompt("the river", doc), return_tensors="pt")
        with torch.no_grad():
            logits = rr.model(**ids).logits[0, -1]
        expected = torch.softmax(logits[[rr.no_id, rr.yes_id]], -1)[1]
        assert s == pytest.approx(float(expected), abs=1e-5)
    assert "<Query>: the river\n<Document>: the dog" in rr.prompt("the river", "the dog")
    with pytest.raises(ValueError, match="no token for"):
        HFYesNoReranker(folder, device="cpu")
