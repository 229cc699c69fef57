"""decodertcr's paper path in pieces: preflight lines, the ESM-2 adapter's id mapping, and the
published-table readers (filters, leakage guards, negatives)."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from components.common.preflight import PreflightError
from components.decodertcr.config import DecodertcrConfig
from components.decodertcr.corpus import AA
from components.decodertcr.model import ESM2_VOCAB, EsmMaskedLM
from components.decodertcr.tables import marginal_from_tables, pairs_from_tables, read_vdjdb
from components.decodertcr.tokens import MAX_LEN, REGION_CDR3, encode, sequence_width
from tests.decodertcr.tables_layout import EPITOPES, VDJDB_HEADER, write_tables


def paper_config(**paper):
    return DecodertcrConfig.for_profile("paper", {"paper": paper})


def preflight_message(**paper) -> str:
    with pytest.raises(PreflightError) as err:
        paper_config(**paper).preflight()
    message = str(err.value)
    assert "\n" not in message
    return message


def test_paper_profile_never_runs_the_toy_without_tables():
    assert paper_config().paper.source == "tables"
    assert preflight_message().startswith("paper.data_root = '' is not set")


def test_preflight_names_the_key_and_the_missing_file(tmp_path, tiny_checkpoints):
    root = write_tables(tmp_path / "t", per_epitope=5, n_repertoire=40, n_ligands=10)
    assert preflight_message(data_root=str(root)).startswith("paper.backbone = '' is not set")
    (root / "ligands.tsv").unlink()
    assert "has no file matching 'ligands.tsv'" in preflight_message(data_root=str(root))


def test_preflight_names_a_missing_vdjdb_column(tmp_path, tiny_checkpoints):
    root = write_tables(tmp_path / "t", per_epitope=5, n_repertoire=40, n_ligands=10)
    table = (root / "vdjdb.slim.txt").read_text().replace("antigen.epitope", "epitope", 1)
    (root / "vdjdb.slim.txt").write_text(table)
    message = preflight_message(data_root=str(root), backbone=str(tiny_checkpoints.checkpoint("esm")))
    assert message.startswith("paper.data_root") and "without column(s) antigen.epitope" in message


def test_preflight_refuses_a_non_esm_backbone(tmp_path, tiny_checkpoints):
    root = write_tables(tmp_path / "t", per_epitope=5, n_repertoire=40, n_ligands=10)
    message = preflight_message(data_root=str(root), backbone=str(tiny_checkpoints.checkpoint("llama")))
    assert message.startswith("paper.backbone") and "not an ESM checkpoint" in message


def test_synthetic_profiles_keep_their_fixed_width():
    assert sequence_width(DecodertcrConfig.for_profile("small")) == MAX_LEN
    assert sequence_width(paper_config()) == 1 + 15 + 1 + 22 + 1


def test_esm_adapter_returns_the_checkpoint_logits_of_each_residue(tiny_checkpoints):
    folder = tiny_checkpoints.checkpoint("esm")
    model = EsmMaskedLM(str(folder), device="cpu").eval()
    peptide, cdr3 = "GILGFVFTL", "CASSLGQAYEQYF"
    tokens, region = (torch.tensor(v) for v in encode(peptide, cdr3, 40))
    # the same complex written in ESM-2's vocabulary by hand: <cls> pep <eos> cdr3 <eos> <pad>...
    chars = ["<cls>", *peptide, "<eos>", *cdr3, "<eos>"]
    ids = [ESM2_VOCAB.index(c) for c in chars] + [ESM2_VOCAB.index("<pad>")] * (40 - len(chars))
    attention = torch.tensor([1] * len(chars) + [0] * (40 - len(chars)))
    with torch.no_grad():
        ours = model(tokens[None])[0]
        ref = model.esm(input_ids=torch.tensor([ids]), attention_mask=attention[None]).logits[0]
    assert ours.shape == (40, 20)
    cdr3_pos = torch.nonzero(region == REGION_CDR3).flatten()
    for a in "ACWY":
        torch.testing.assert_close(ours[cdr3_pos, AA.index(a)], ref[cdr3_pos, ESM2_VOCAB.index(a)])
    fresh = EsmMaskedLM(str(folder), device="cpu")
    fresh.load_state_dict(model.state_dict())            # what score/generate do with model.pt


def small_tables(tmp_path, extra_rows=()):
    root = write_tables(tmp_path / "t", per_epitope=6, n_repertoire=80, n_ligands=30)
    if extra_rows:
        with (root / "vdjdb.slim.txt").open("a") as f:
            for row in extra_rows:
                f.write("\t".join(map(str, row)) + "\n")
    cfg = paper_config(data_root=str(root))
    return cfg, root


def test_vdjdb_filters_keep_human_trb_binders_of_populated_epitopes(tmp_path):
    cfg, root = small_tables(tmp_path)
    table, kept = read_vdjdb(root, cfg.paper, cfg.data)
    assert sorted(kept) == sorted(EPITOPES) and len(table) == 6 * len(EPITOPES)
    assert set(table["gene"]) == {"TRB"} and set(table["species"]) == {"HomoSapiens"}
    strict = cfg.paper.model_copy(update={"min_binders": 7})
    with pytest.raises(ValueError, match="fewer than 2 epitopes"):
        read_vdjdb(root, strict, cfg.data)


def test_marginal_data_hold_no_vdjdb_cdr3_and_no_epitope(tmp_path):
    cfg, root = small_tables(tmp_path)
    table, _ = read_vdjdb(root, cfg.paper, cfg.data)
    marginal, peptides, background = marginal_from_tables(cfg.paper, cfg.data, np.random.default_rng(0))
    binders = set(table["cdr3"])
    assert not binders & set(marginal["cdr3"]) and not binders & set(background["cdr3"])
    assert not set(marginal["cdr3"]) & set(background["cdr3"])
    assert not set(EPITOPES) & set(peptides) and len(peptides) == 30
    assert all(v.startswith("TRBV") and "*" not in v for v in marginal["v"])


def test_swapped_negatives_never_pair_a_tcr_with_an_epitope_it_binds(tmp_path):
    cfg, root = small_tables(tmp_path)
    table, _ = read_vdjdb(root, cfg.paper, cfg.data)
    shared = table["cdr3"].iloc[0]              # also recorded for every other epitope but one
    rows = [dict(zip(VDJDB_HEADER, ["TRB", shared, "HomoSapiens", e, "M", "X", 0, "TRBV1*01", "TRBJ1-1*01",
                                    -1, -1, "HLA-A*02:01", "B2M", "MHCI", "PMID:0", 1])) for e in EPITOPES[1:-1]]
    cfg, root = small_tables(tmp_path / "again", [tuple(r.values()) for r in rows])
    _, _, background = marginal_from_tables(cfg.paper, cfg.data, np.random.default_rng(0))
    pairs, pool, epitopes = pairs_from_tables(cfg.paper, cfg.data, background, np.random.default_rng(1))
    bound = {(pool["cdr3"][t], epitopes[e]) for t, e, y in zip(pairs["tcr_id"], pairs["epitope_id"], pairs["label"]) if y}
    for t, e, kind in zip(pairs["tcr_id"], pairs["epitope_id"], pairs["kind"]):
        if kind != "positive":
            assert (pool["cdr3"][t], epitopes[e]) not in bound
    assert int(pairs["label"].sum()) == len(bound) == 6 * len(EPITOPES) + len(rows)
    assert (pairs["kind"] == "background").sum() == pairs["label"].sum()
