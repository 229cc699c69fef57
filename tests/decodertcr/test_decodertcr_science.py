"""Unit tests of the decodertcr science: IEGR, masking, PLL, energy and split leakage."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from components.decodertcr.config import DecodertcrConfig
from components.decodertcr.corpus import (AA, assign_binders, assign_splits, energy, make_oracle,
                                          make_pairs)
from components.decodertcr.decoding import entropy, iegr, left_to_right, one_shot
from components.decodertcr.model import MaskedLM, masked_peptide_pll, mlm_loss
from components.decodertcr.tokens import (CLS, EOS, MASK, MAX_LEN, N_SPECIAL, PAD, REGION_CDR3,
                                          REGION_PEPTIDE, SEP, decode_region, encode,
                                          encode_many, mask_batch)


class IndependentSites(torch.nn.Module):
    """A 'model' whose logits at each position ignore the context (closed-form IEGR order)."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = logits                 # (T, 20)
        self.calls = 0

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.logits[None].expand(tokens.shape[0], -1, -1)


def _template():
    tokens, region = encode("GLCTLVAML", "CASSLAPGATNEKLFF")
    positions = torch.nonzero(torch.tensor(region) == REGION_CDR3).flatten().tolist()[3:-3]
    return torch.tensor(tokens), torch.tensor(region), positions


def test_iegr_commits_lowest_entropy_first_and_is_argmax_at_zero_temperature():
    tokens, region, positions = _template()
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(MAX_LEN, 20, generator=gen) * torch.linspace(0.2, 5.0, MAX_LEN)[torch.randperm(MAX_LEN, generator=gen)][:, None]
    model = IndependentSites(logits)
    designed, order = iegr(model, tokens, positions, 0.0, gen)
    expected = sorted(positions, key=lambda p: float(entropy(logits[p])))
    assert order == expected
    assert model.calls == len(positions)      # one forward per committed residue
    assert designed[positions].tolist() == (logits[positions].argmax(-1) + N_SPECIAL).tolist()
    keep = [i for i in range(MAX_LEN) if i not in positions]
    assert torch.equal(designed[keep], tokens[keep])


@pytest.mark.parametrize("method", ["iegr", "one_shot", "left_to_right"])
def test_decoders_return_valid_sequences_of_the_right_length(method):
    tokens, region, positions = _template()
    torch.manual_seed(0)
    model = MaskedLM(d_model=16, n_layers=1, n_heads=2).eval()
    gen = torch.Generator().manual_seed(1)
    if method == "iegr":
        designed = iegr(model, tokens, positions, 1.0, gen, gibbs_rounds=1, gibbs_subset=3)[0]
    else:
        designed = {"one_shot": one_shot, "left_to_right": left_to_right}[method](
            model, tokens, positions, 1.0, gen)
    cdr3 = decode_region(designed, region, REGION_CDR3)
    assert len(cdr3) == len("CASSLAPGATNEKLFF") and set(cdr3) <= set(AA)
    assert cdr3[:3] == "CAS" and cdr3[-3:] == "LFF"
    assert (designed != MASK).all()
    assert decode_region(designed, region, REGION_PEPTIDE) == "GLCTLVAML"


def test_masking_never_touches_special_tokens():
    tokens, region = encode_many(["GLCTLVAML", "", "NLVPMVATV"], ["", "CASSLGQAYEQYF", "CASSPDRGNTIYF"])
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        inputs, targets = mask_batch(tokens, region, rate=0.5, segment_prob=0.5, gen=gen)
        special = torch.isin(tokens, torch.tensor([PAD, CLS, SEP, EOS]))
        assert torch.equal(inputs[special], tokens[special])
        assert (targets[special] == -100).all()
        masked = inputs == MASK
        assert masked.any(1).all()            # every row has a target
        assert torch.equal(targets[masked], tokens[masked] - N_SPECIAL)
        assert (targets[~masked] == -100).all()


def test_mlm_loss_is_finite_and_pll_matches_closed_form():
    tokens, region = encode_many(["GLCTLVAML"], ["CASSLGQAYEQYF"])
    logits = torch.randn(MAX_LEN, 20, generator=torch.Generator().manual_seed(3))
    model = IndependentSites(logits)
    pep = torch.nonzero(region[0] == REGION_PEPTIDE).flatten()
    expected = F.log_softmax(logits[pep], -1).gather(-1, (tokens[0, pep] - N_SPECIAL)[:, None]).mean()
    assert float(masked_peptide_pll(model, tokens, region)[0]) == pytest.approx(float(expected), abs=1e-6)
    real = MaskedLM(d_model=16, n_layers=1, n_heads=2)
    batch = mask_batch(tokens, region, 0.3, 0.5, torch.Generator().manual_seed(0))
    assert torch.isfinite(mlm_loss(real, batch))


def test_energy_matches_explicit_sum():
    oracle = make_oracle(0, 10)
    cdr3, pep = "CASSLAPGATNEKLFF", "GLCTLVAML"
    start = (len(cdr3) - 5) // 2
    explicit = sum(oracle["contacts"][i, j] * oracle["matrix"][AA.index(cdr3[start + i]), AA.index(pep[3 + j])]
                   for i in range(5) for j in range(5))
    assert energy([cdr3], pep, oracle)[0] == pytest.approx(explicit)


def test_splits_do_not_leak_heldout_tcrs_or_epitopes_into_training():
    d = DecodertcrConfig.for_profile("small").data
    rng = np.random.default_rng(0)
    z = rng.standard_normal((d.n_epitopes, 3000))
    binders = assign_binders(z, rng.standard_normal(z.shape), 0.5, 0.98, 30, rng)
    pairs = make_pairs(binders, 3000, rng)
    split = assign_splits(pairs, d.n_epitopes, d, rng)
    train = split == "train"
    assert not set(pairs["tcr_id"][split == "test_tcr"]) & set(pairs["tcr_id"][train])
    assert not set(pairs["tcr_id"][split == "val"]) & set(pairs["tcr_id"][train])
    assert not set(pairs["epitope_id"][split == "test_epitope"]) & set(pairs["epitope_id"][train])
    assert {"train", "test_tcr", "test_epitope", "val"} <= set(split)
    # each positive has one swapped and one background negative; binders are unique per epitope
    assert (pairs["label"] == 1).sum() * 3 == len(pairs["label"])
    positives = pairs["tcr_id"][pairs["label"] == 1]
    assert len(set(positives)) == len(positives)


def test_profiles_load_and_paper_preflight_names_the_missing_path():
    assert DecodertcrConfig.for_profile("smoke").train.marginal_steps < DecodertcrConfig().train.marginal_steps
    with pytest.raises(FileNotFoundError, match="paper.data_root"):
        DecodertcrConfig.for_profile("paper").preflight()
