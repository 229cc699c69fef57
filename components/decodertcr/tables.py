"""The paper profile's data: published tables under ``paper.data_root`` instead of the planted
world. The tables become the same files the synthetic stages write (``marginal_tcr.parquet``,
``marginal_pep.parquet``, ``paired.parquet``, ``pool.parquet``), so every later stage is shared.

- paired TCR-epitope complexes: a VDJdb release table (``vdjdb.slim.txt``, tab-separated,
  one chain per row); kept: ``gene == TRB``, the configured species and minimum score;
- unpaired TCRs: AIRR rearrangement TSVs (``repertoire/*.tsv``: ``junction_aa``, ``v_call``,
  ``j_call``), e.g. OTS / iReceptor exports; they are the marginal corpus and the background
  negatives (disjoint sets, neither holding a VDJdb CDR3);
- unpaired peptide ligands: ``ligands.tsv`` with a ``peptide`` column (e.g. IEDB's MHC ligand
  export or NetMHCpan EL positives reduced to the peptide); VDJdb epitopes are removed, so the
  marginal data never hold an evaluation epitope (as in the synthetic world).
"""
from __future__ import annotations

import numpy as np

from components.common.preflight import PreflightError, require_checkpoint, require_dir

VDJDB_FILE = "vdjdb.slim.txt"
REPERTOIRE_GLOB = "repertoire/*.tsv"
LIGANDS_FILE = "ligands.tsv"
TABLES_LAYOUT = (f"a folder with {VDJDB_FILE} (VDJdb release, tab-separated: gene, cdr3, species, "
                 f"antigen.epitope, v.segm, j.segm, vdjdb.score), {REPERTOIRE_GLOB} (AIRR TSV: "
                 f"junction_aa, v_call, j_call) and {LIGANDS_FILE} (tab-separated, a peptide column)")
VDJDB_COLUMNS = ("gene", "cdr3", "species", "antigen.epitope", "v.segm", "j.segm", "vdjdb.score")
AIRR_COLUMNS = ("junction_aa", "v_call", "j_call")
AMINO_ACIDS = frozenset("ACDEFGHIKLMNPQRSTVWY")


def check_tables(paper) -> None:
    """Preflight of the tables source: the data root's files and their header columns, and an
    ESM checkpoint folder; each failure is one line naming the key."""
    root = require_dir("paper.data_root", paper.data_root, TABLES_LAYOUT,
                       patterns=(VDJDB_FILE, REPERTOIRE_GLOB, LIGANDS_FILE))
    for pattern, columns in ((VDJDB_FILE, VDJDB_COLUMNS), (REPERTOIRE_GLOB, AIRR_COLUMNS),
                             (LIGANDS_FILE, ("peptide",))):
        for path in sorted(root.glob(pattern)):
            header = path.open().readline().rstrip("\n").split("\t")
            missing = [c for c in columns if c not in header]
            if missing:
                raise PreflightError("paper.data_root", paper.data_root, TABLES_LAYOUT,
                                     f"has {path.name} without column(s) {', '.join(missing)}")
    folder = require_checkpoint("paper.backbone", paper.backbone,
                                "an ESM-2 save_pretrained folder (EsmForMaskedLM: config.json + weights)")
    from components.common.hf_models import read_config

    if read_config(folder).get("model_type") != "esm":
        raise PreflightError("paper.backbone", paper.backbone, "an ESM-2 save_pretrained folder",
                             "is not an ESM checkpoint (config model_type is not 'esm')")


def _read_tsv(path):
    import pandas as pd

    return pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)


def clean(seqs, min_len: int, max_len: int) -> np.ndarray:
    """Mask of sequences made of the 20 amino acids with a length in range."""
    return np.array([min_len <= len(s) <= max_len and set(s) <= AMINO_ACIDS for s in seqs], bool)


def read_vdjdb(root, paper, d):
    """Unique (epitope, CDR3beta) binders of the kept epitopes, with V/J genes."""
    table = _read_tsv(root / VDJDB_FILE)
    table = table[(table["gene"] == "TRB") & (table["species"] == paper.species)
                  & (table["vdjdb.score"].astype(int) >= paper.min_vdjdb_score)]
    table = table[clean(table["cdr3"], d.cdr3_min_len, d.cdr3_max_len)
                  & clean(table["antigen.epitope"], 8, paper.max_peptide_len)]
    table = table.drop_duplicates(["antigen.epitope", "cdr3"])
    counts = table["antigen.epitope"].value_counts()
    counts = counts[counts >= paper.min_binders]
    # most-populated first, ties by sequence, so the kept set does not depend on file order
    kept = sorted(counts.index, key=lambda e: (-counts[e], e))
    if paper.max_epitopes:
        kept = kept[:paper.max_epitopes]
    if len(kept) < 2:
        raise ValueError(f"{root / VDJDB_FILE}: fewer than 2 epitopes with >= {paper.min_binders} "
                         "TRB binders after filtering (swapped negatives need two)")
    table = table[table["antigen.epitope"].isin(kept)]
    return table.rename(columns={"antigen.epitope": "epitope", "v.segm": "v", "j.segm": "j"}), kept


def read_repertoire(root, d, exclude: set[str]) -> dict[str, list]:
    """Unique AIRR CDR3s (junction_aa) in range, VDJdb CDR3s removed, gene alleles dropped."""
    import pandas as pd

    frames = [_read_tsv(p)[list(AIRR_COLUMNS)] for p in sorted(root.glob(REPERTOIRE_GLOB))]
    table = pd.concat(frames, ignore_index=True).drop_duplicates("junction_aa")
    table = table[clean(table["junction_aa"], d.cdr3_min_len, d.cdr3_max_len)
                  & ~table["junction_aa"].isin(exclude)]
    return {"cdr3": table["junction_aa"].tolist(),
            "v": [v.split("*")[0] for v in table["v_call"]],
            "j": [j.split("*")[0] for j in table["j_call"]]}


def read_ligands(root, paper, exclude: set[str]) -> list[str]:
    peptides = _read_tsv(root / LIGANDS_FILE)["peptide"].drop_duplicates()
    peptides = peptides[clean(peptides, 8, paper.max_peptide_len) & ~peptides.isin(exclude)]
    return peptides.tolist()


def marginal_from_tables(paper, d, rng: np.random.Generator) -> tuple[dict, list[str], dict]:
    """(marginal TCRs, marginal peptides, background pool): the repertoire is shuffled once;
    the first ``n_marginal_tcr`` go to S1, the rest are background negatives."""
    from pathlib import Path

    root = Path(paper.data_root).expanduser()
    vdjdb, _ = read_vdjdb(root, paper, d)
    repertoire = read_repertoire(root, d, set(vdjdb["cdr3"]))
    order = rng.permutation(len(repertoire["cdr3"]))
    n = min(d.n_marginal_tcr, len(order) // 2)      # keep at least half for background negatives
    marginal = {k: [v[i] for i in order[:n]] for k, v in repertoire.items()}
    background = {k: [v[i] for i in order[n:]] for k, v in repertoire.items()}
    peptides = read_ligands(root, paper, set(vdjdb["epitope"]))
    peptides = [peptides[i] for i in np.sort(rng.permutation(len(peptides))[:d.n_marginal_pep])]
    return marginal, peptides, background


def pairs_from_tables(paper, d, background: dict, rng: np.random.Generator) -> tuple[dict, dict, list[str]]:
    """VDJdb positives, one swapped negative (the binder with an epitope it is not recorded to
    bind) and one background negative (an unseen repertoire TCR) per positive. Returns
    (pairs with ``epitope_id``/``tcr_id``/``label``/``kind``, the TCR pool, the epitopes)."""
    from pathlib import Path

    vdjdb, epitopes = read_vdjdb(Path(paper.data_root).expanduser(), paper, d)
    binder_cdr3 = sorted(set(vdjdb["cdr3"]))
    # shuffled (data seed), so a prefix of the pool (evaluate_generation's "real" CDR3s for
    # Pgen) is not an alphabetical slice
    binder_cdr3 = [binder_cdr3[i] for i in rng.permutation(len(binder_cdr3))]
    genes = vdjdb.drop_duplicates("cdr3").set_index("cdr3")
    n_bg = min(len(vdjdb), len(background["cdr3"]))
    if n_bg < len(vdjdb):
        raise ValueError(f"{paper.data_root}: {len(background['cdr3'])} background repertoire TCRs "
                         f"for {len(vdjdb)} positives; supply a larger repertoire")
    bg_rows = rng.permutation(len(background["cdr3"]))[:n_bg]
    pool = {"cdr3": binder_cdr3 + [background["cdr3"][i] for i in bg_rows],
            "v": [genes.loc[c, "v"] for c in binder_cdr3] + [background["v"][i] for i in bg_rows],
            "j": [genes.loc[c, "j"] for c in binder_cdr3] + [background["j"][i] for i in bg_rows]}
    tcr_id = {c: i for i, c in enumerate(binder_cdr3)}
    epitope_id = {e: i for i, e in enumerate(epitopes)}
    binds = vdjdb.groupby("cdr3")["epitope"].agg(set).to_dict()
    epi, tcr, label, kind = [], [], [], []
    rows = vdjdb.sort_values(["epitope", "cdr3"])
    for n, (e, c) in enumerate(zip(rows["epitope"], rows["cdr3"])):
        others = [x for x in epitopes if x not in binds[c]]
        epi += [epitope_id[e]] + ([epitope_id[others[rng.integers(len(others))]]] if others else []) + [epitope_id[e]]
        tcr += [tcr_id[c]] + ([tcr_id[c]] if others else []) + [len(binder_cdr3) + n]
        label += [1] + ([0] if others else []) + [0]
        kind += ["positive"] + (["swapped"] if others else []) + ["background"]
    pairs = {"epitope_id": np.array(epi), "tcr_id": np.array(tcr), "label": np.array(label),
             "kind": np.array(kind)}
    return pairs, pool, epitopes
