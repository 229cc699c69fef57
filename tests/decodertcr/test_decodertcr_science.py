"""Unit tests of the decodertcr science: IEGR, masking, PLL, energy and split leakage."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from components.decodertcr.config import DecodertcrConfig
from components.decodertcr.corpus import (AA, assign_binders, assign_splits, blosum62, energy,
                                          exhaustive_optimum, greedy_left_to_right, make_oracle,
                                          make_pairs, standardised_blosum62)
from components.decodertcr.train import capped_binders
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
    oracle = make_oracle(0, 10, 5, 1.0)
    cdr3, pep = "CASSLAPGATNEKLFF", "GLCTLVAML"
    start = (len(cdr3) - 5) // 2
    m = oracle["matrix"]
    explicit = sum(oracle["contacts"][i, j] * m[AA.index(cdr3[start + i]), AA.index(pep[3 + j])]
                   for i in range(5) for j in range(5))
    explicit += sum(oracle["intra"][i, k] * m[AA.index(cdr3[start + i]), AA.index(cdr3[start + k])]
                    for i in range(5) for k in range(i + 1, 5))
    assert energy([cdr3], pep, oracle)[0] == pytest.approx(explicit)
    assert (oracle["intra"] != 0).sum() == 5 and not np.tril(oracle["intra"]).any()


def test_blosum62_table_spot_values_and_standardisation():
    b = blosum62()
    ix = AA.index
    assert np.array_equal(b, b.T) and b.sum() == -426
    assert (b[ix("W"), ix("W")], b[ix("C"), ix("C")], b[ix("A"), ix("A")]) == (11, 9, 4)
    assert (b[ix("I"), ix("V")], b[ix("D"), ix("E")], b[ix("W"), ix("N")]) == (3, 2, -4)
    assert np.diag(b).min() == 4 and np.diag(b).argmax() == ix("W")
    s = standardised_blosum62()
    assert s.mean() == pytest.approx(0, abs=1e-12) and s.std() == pytest.approx(1)


def test_exhaustive_optimum_matches_brute_force_and_bounds_greedy():
    import itertools

    oracle = make_oracle(3, 10, 5, 1.0)
    pep = "GLCTLVAML"
    cands = ["".join(t) for t in itertools.product("WCLIKDGS", repeat=5)]
    sub = {**oracle, "matrix": oracle["matrix"]}
    # brute force over a residue subset bounds the exhaustive optimum from below
    assert exhaustive_optimum(pep, sub) >= energy(cands, pep, oracle).max() - 1e-9
    assert greedy_left_to_right(pep, oracle) <= exhaustive_optimum(pep, oracle) + 1e-9
    # without CDR3-CDR3 couplings the optimum is separable, so greedy is exact
    separable = {**oracle, "intra": np.zeros_like(oracle["intra"])}
    assert greedy_left_to_right(pep, separable) == pytest.approx(exhaustive_optimum(pep, separable))


def test_absent_peptide_keeps_cdr3_positions_of_a_complex():
    alone, _ = encode("", "CASSLGF")
    pair, region = encode("GLCTLVAML", "CASSLGF")
    cdr3 = [i for i, r in enumerate(region) if r == REGION_CDR3]
    assert [alone[i] for i in cdr3] == [pair[i] for i in cdr3]
    assert alone[1:10] == [PAD] * 9


def test_binder_caps_are_nested_and_per_epitope():
    split = np.array(["train"] * 8 + ["val"] * 2)
    label = np.array([1, 1, 1, 0, 1, 1, 1, 0, 1, 1])
    epi = np.array([0, 0, 0, 0, 1, 1, 1, 1, 0, 1])
    two, one = capped_binders(split, label, epi, 2), capped_binders(split, label, epi, 1)
    assert two.tolist() == [0, 1, 4, 5] and one.tolist() == [0, 4]


class GibbsSpoiler(torch.nn.Module):
    """Single-sequence calls after phase 1 push every residue to C; batched calls (the PLL
    scorer) prefer A. The best state is then the phase-1 design, not the last Gibbs state."""

    def __init__(self, n_phase1: int):
        super().__init__()
        self.n_phase1, self.single_calls = n_phase1, 0

    def forward(self, tokens):
        logits = torch.zeros(tokens.shape[0], tokens.shape[1], 20)
        if tokens.shape[0] == 1:
            self.single_calls += 1
            favourite = AA.index("A") if self.single_calls <= self.n_phase1 else AA.index("C")
        else:
            favourite = AA.index("A")
        logits[..., favourite] = 10.0
        return logits


def test_iegr_returns_the_best_state_over_its_gibbs_rounds():
    tokens, region, positions = _template()
    model = GibbsSpoiler(len(positions))
    designed, _ = iegr(model, tokens, positions, 0.0, torch.Generator().manual_seed(0),
                       gibbs_rounds=2, gibbs_subset=3)
    assert model.single_calls > len(positions)            # the Gibbs rounds did run
    assert decode_region(designed, region, REGION_CDR3)[3:-3] == "A" * len(positions)


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


def test_interface_compatibility_and_dense_tcr_score_match_explicit_sums():
    from components.decodertcr.corpus import (cdr3_middle, interface_compatibility, tcr_score)

    m = standardised_blosum62()
    idx = {a: i for i, a in enumerate(AA)}
    cdr3s, pep = ["CASSLAPGATNEKLFF", "CASSWQDRGYTF"], "GLCTLVAML"
    got = interface_compatibility(cdr3s, pep, m)
    oracle = make_oracle(0, 10, 5, 1.0)
    dense = tcr_score(cdr3s, oracle, "dense")
    for n, c in enumerate(cdr3s):
        mid = cdr3_middle(c)
        want = np.mean([m[idx[a], idx[b]] for a in mid for b in pep[3:8]])
        assert got[n] == pytest.approx(want)
        pairs = [m[idx[mid[i]], idx[mid[k]]] for i in range(5) for k in range(i + 1, 5)]
        assert dense[n] == pytest.approx(np.mean(pairs))
    with pytest.raises(ValueError, match="marginal_tcr_score"):
        tcr_score(cdr3s, oracle, "other")


class CompatibilityModel(torch.nn.Module):
    """Logits of a masked residue = sum of M[a, b] over the two residues either side of it:
    a model that has learned the within-chain rule exactly (probe correlation 1)."""

    def __init__(self, matrix):
        super().__init__()
        self.m = torch.tensor(matrix, dtype=torch.float)

    def forward(self, tokens):
        out = torch.zeros(*tokens.shape, 20)
        for r, c in (tokens == MASK).nonzero().tolist():
            ctx = [int(tokens[r, c + d]) - N_SPECIAL for d in (-2, -1, 1, 2)]
            out[r, c] = self.m[:, ctx].sum(1)
        return out


def test_compatibility_probe_is_one_for_the_rule_and_zero_without_context():
    from components.decodertcr.evaluate import compatibility_probe

    m = standardised_blosum62()
    cdr3s = ["CASSLAPGATNEKLFF", "CASSWQDRGYTF", "CASRPGQGNYEQYF", "CSVEGTGELFF"]
    exact = compatibility_probe(CompatibilityModel(m), cdr3s, m, MAX_LEN)
    assert exact["corr_tcr"] == pytest.approx(1.0) and exact["corr_pep"] == pytest.approx(1.0)
    blind = compatibility_probe(IndependentSites(torch.zeros(MAX_LEN, 20)), cdr3s, m, MAX_LEN)
    assert blind["corr"] == pytest.approx(0.0, abs=1e-6)
