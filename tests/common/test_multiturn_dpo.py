"""The shared multi-turn DPO path: the sigmoid loss by hand, masked token sums by hand, masked
tokens that cannot move the loss, and a tiny random Qwen2-VL on multi-turn sequences with
images (padding does not leak, trailing observations do not count, loss log 2 at pi == pi_ref,
gradient accumulation equals the full batch)."""
import copy
import math

import numpy as np
import pytest
import torch

from components.common.multiturn_dpo import (dpo_sigmoid_loss, masked_token_logps, pad_sequences,
                                             qwen2_vl_image_inputs, sequence_logps, train_pairs)

VOCAB = 520                       # text ids < 512; Qwen2-VL's special ids sit at the top
IMG, START, END = VOCAB - 1, VOCAB - 3, VOCAB - 4
GRID = torch.tensor([1, 4, 4])    # 16 patches of 4x4 pixels x 2 frames x 3 channels, merged 2x2: 4 tokens
PATCH_DIM = 3 * 2 * 4 * 4


def test_dpo_sigmoid_loss_hand_computed():
    pi_w, pi_l = torch.tensor([-3.0, -1.0]), torch.tensor([-5.0, -2.0])
    ref_w, ref_l = torch.tensor([-4.0, -1.0]), torch.tensor([-4.0, -2.0])
    # pair 1: 0.5 * ((-3 + 4) - (-5 + 4)) = 1; pair 2: 0
    expected = (math.log(1 + math.exp(-1.0)) + math.log(2)) / 2
    assert dpo_sigmoid_loss(pi_w, pi_l, ref_w, ref_l, beta=0.5).item() == pytest.approx(expected, rel=1e-6)
    assert dpo_sigmoid_loss(pi_w, pi_l, pi_w, pi_l, beta=3.0).item() == pytest.approx(math.log(2), abs=1e-7)


def test_masked_token_logps_hand_computed():
    logits = torch.tensor([[[1.0, 0.0, 2.0], [0.5, 1.5, -1.0], [0.0, 0.0, 0.0]]])
    ids = torch.tensor([[0, 2, 1]])
    l0, l1 = torch.log_softmax(logits[0, 0], -1), torch.log_softmax(logits[0, 1], -1)
    got = masked_token_logps(logits, ids, torch.tensor([[False, True, False]]))
    assert got.item() == pytest.approx(l0[2].item(), rel=1e-6)
    everything = masked_token_logps(logits, ids, torch.tensor([[True, True, True]]))   # token 0: no prediction
    assert everything.item() == pytest.approx((l0[2] + l1[1]).item(), rel=1e-6)


def test_masked_tokens_do_not_change_the_loss():
    """Perturb every masked position (its target token and the logits that predict it): the
    sequence log-probs and the DPO loss are bit-identical; perturb one policy token: they move."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 12, 30, generator=g)
    ids = torch.randint(0, 30, (4, 12), generator=g)
    mask = torch.zeros(4, 12, dtype=torch.bool)
    mask[:, [3, 4, 8, 9, 10]] = True
    base = masked_token_logps(logits, ids, mask)
    noisy_logits, noisy_ids = logits.clone(), ids.clone()
    for t in (~mask).nonzero():
        b, pos = int(t[0]), int(t[1])
        noisy_ids[b, pos] = (noisy_ids[b, pos] + 7) % 30
        if pos > 0:
            noisy_logits[b, pos - 1] += 5 * torch.randn(30, generator=g)
    noisy = masked_token_logps(noisy_logits, noisy_ids, mask)
    assert torch.equal(base, noisy)
    ref = base.detach() - 1.0
    assert torch.equal(dpo_sigmoid_loss(base[:2], base[2:], ref[:2], ref[2:], 0.5),
                       dpo_sigmoid_loss(noisy[:2], noisy[2:], ref[:2], ref[2:], 0.5))
    noisy_ids[0, 4] = (noisy_ids[0, 4] + 1) % 30
    assert masked_token_logps(noisy_logits, noisy_ids, mask)[0] != base[0]


# -- a tiny random Qwen2-VL on multi-turn sequences with images --------------------------------------
@pytest.fixture(scope="module")
def vlm():
    from components.common.tiny_models import build_tiny

    model = build_tiny("qwen2_vl", text_config={"vocab_size": VOCAB}).eval()
    assert (model.config.image_token_id, model.config.vision_start_token_id) == (IMG, START)
    return model


def encode(segments):
    """(ids, policy_mask, [patches per image]) from segments: ("obs", ids), ("policy", ids), ("img", patches)."""
    ids, mask, images = [], [], []
    for kind, value in segments:
        if kind == "img":
            ids += [START] + [IMG] * 4 + [END]
            mask += [False] * 6
            images.append(value)
        else:
            ids += list(value)
            mask += [kind == "policy"] * len(value)
    return ids, mask, images


def chat(g, policy=((20, 21, 22), (23, 24)), tail=(12, 13)):
    """Prompt + image, a policy turn, an observation turn with an image, a policy turn, and a
    trailing observation turn (text + image) after the last policy token."""
    img = lambda: torch.randn(16, PATCH_DIM, generator=g)  # noqa: E731
    return [("obs", [5, 6, 7]), ("img", img()), ("obs", [8, 9]), ("policy", policy[0]),
            ("obs", [10]), ("img", img()), ("obs", [11]), ("policy", policy[1]),
            ("obs", tail), ("img", img()), ("obs", [14])]


def logps_of(model, encoded):
    ids, attn, mask = pad_sequences([(e[0], e[1]) for e in encoded], pad_id=0)
    pixels = [p for e in encoded for p in e[2]]
    inputs = qwen2_vl_image_inputs(ids, IMG, torch.cat(pixels), GRID[None].repeat(len(pixels), 1))
    assert torch.equal(inputs["mm_token_type_ids"].bool(), ids == IMG)
    return sequence_logps(model, ids, attn, mask, **inputs)


def test_padded_batch_equals_one_sequence_at_a_time(vlm):
    g = torch.Generator().manual_seed(1)
    a = encode(chat(g))
    b = encode(chat(g, policy=((30,), (31, 32, 33)), tail=(40,))[:8])     # shorter, two images
    with torch.no_grad():
        batch = logps_of(vlm, [a, b])
        alone = torch.cat([logps_of(vlm, [a]), logps_of(vlm, [b])])
    assert batch.shape == (2,) and torch.allclose(batch, alone, atol=1e-5)


def test_trailing_observation_tokens_and_images_do_not_count(vlm):
    """Change the text and the image of the observation after the last policy token: the
    trajectory's log-prob stays; change a policy token: it moves."""
    segs = chat(torch.Generator().manual_seed(2))
    base = encode(segs)
    other = list(segs)
    other[-3] = ("obs", [100, 101, 102])
    other[-2] = ("img", torch.randn(16, PATCH_DIM, generator=torch.Generator().manual_seed(3)))
    moved = list(segs)
    moved[3] = ("policy", (20, 21, 99))
    with torch.no_grad():
        lp = logps_of(vlm, [base, encode(other), encode(moved)])
    assert lp[1].item() == pytest.approx(lp[0].item(), abs=1e-5)
    assert abs(lp[2].item() - lp[0].item()) > 1e-3


def test_train_pairs_loss_is_log2_at_reference_and_accumulation_matches_full_batch(vlm):
    g = torch.Generator().manual_seed(4)
    rows = [encode(chat(g, policy=((20 + i, 21), (22, 23 + i)))) for i in range(4)]
    pairs = [(0, 1), (2, 3)]

    def run(micro_batch):
        model = copy.deepcopy(vlm)
        logps = lambda idx: logps_of(model, [rows[i] for i in idx])  # noqa: E731
        with torch.no_grad():
            before = logps([0, 1, 2, 3])
        res = train_pairs(logps, pairs, torch.optim.SGD(model.parameters(), lr=1e-3), beta=0.5,
                          batch_size=2, micro_batch=micro_batch, rng=np.random.default_rng(0))
        with torch.no_grad():
            after = logps([0, 1, 2, 3])
        return res, model, after - before

    full, m_full, d = run(micro_batch=2)
    acc, m_acc, _ = run(micro_batch=1)
    assert full.n_pairs == 2 and len(full.losses) == 1
    assert full.losses[0] == pytest.approx(math.log(2), abs=1e-6)          # pi == pi_ref
    assert full.margins[0] == pytest.approx(0.0, abs=1e-6) and full.accuracies[0] == 0.0
    assert acc.losses[0] == pytest.approx(full.losses[0], abs=1e-6)
    for p, q in zip(m_full.parameters(), m_acc.parameters()):
        assert torch.allclose(p, q, atol=1e-6)
    assert (d[0] - d[1]) + (d[2] - d[3]) > 0                             # winners' log-ratios rose


def test_no_pairs_trains_nothing():
    called = []
    res = train_pairs(lambda idx: called.append(idx), [], torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0),
                      beta=0.5)
    assert res.n_pairs == 0 and res.losses == [] and called == []
