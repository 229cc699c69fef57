"""Synthetic corpora: unpaired CDR3beta (OLGA), anchor-motif peptides, planted TCR-epitope pairs.

Specificity is planted with a hidden contact energy between the CDR3 middle and peptide
P4-P8; a TCR "binds" an epitope when its (noisy) energy is in the top tail for that epitope.
"""
from __future__ import annotations

import os
from functools import lru_cache

import numpy as np
import torch

from components.common.io import save_torch, write_json_atomic, write_table

AA = "ACDEFGHIKLMNPQRSTVWY"
AA_INDEX = {a: i for i, a in enumerate(AA)}
PEP_LEN = 9
PEP_CONTACT = np.arange(3, 8)          # P4..P8 (0-based 3..7)
CDR3_MIDDLE = 5                        # middle residues of the CDR3 that touch the peptide


# ---------------------------------------------------------------- OLGA (unpaired TCRs, Pgen)
@lru_cache(maxsize=1)
def olga_trb():
    """OLGA's shipped human TRB model: (genomic data, generative model)."""
    import olga
    import olga.load_model as load_model

    root = os.path.join(os.path.dirname(olga.__file__), "default_models", "human_T_beta")
    genomic = load_model.GenomicDataVDJ()
    genomic.load_igor_genomic_data(f"{root}/model_params.txt", f"{root}/V_gene_CDR3_anchors.csv",
                                   f"{root}/J_gene_CDR3_anchors.csv")
    model = load_model.GenerativeModelVDJ()
    model.load_and_process_igor_model(f"{root}/model_marginals.txt")
    return genomic, model


def sample_cdr3b(n: int, seed: int, min_len: int, max_len: int) -> dict[str, list]:
    """``n`` unique productive CDR3beta (amino acids) with V/J genes, lengths in range."""
    import olga.sequence_generation as seq_gen

    genomic, model = olga_trb()
    np.random.seed(seed)  # OLGA draws from numpy's global RNG
    generator = seq_gen.SequenceGenerationVDJ(model, genomic)
    seen, cdr3, v, j = set(), [], [], []
    while len(cdr3) < n:
        _, aa, vi, ji = generator.gen_rnd_prod_CDR3()
        if not (min_len <= len(aa) <= max_len) or aa in seen or not set(aa) <= set(AA):
            continue
        seen.add(aa)
        cdr3.append(aa)
        v.append(genomic.genV[vi][0].split("*")[0])
        j.append(genomic.genJ[ji][0].split("*")[0])
    return {"cdr3": cdr3, "v": v, "j": j}


def log10_pgen(cdr3s: list[str]) -> np.ndarray:
    import olga.generation_probability as pgen

    genomic, model = olga_trb()
    scorer = pgen.GenerationProbabilityVDJ(model, genomic)
    values = np.array([scorer.compute_aa_CDR3_pgen(s) for s in cdr3s], dtype=float)
    return np.log10(np.clip(values, 1e-300, None))


# ---------------------------------------------------------------- peptides
def anchor_pwm() -> np.ndarray:
    """HLA-A*02-like 9-mer motif: L/M at P2, V/L/I at P9, mildly uniform elsewhere."""
    pwm = np.full((PEP_LEN, len(AA)), 1.0)
    for aa, w in {"L": 30, "M": 8, "I": 4}.items():
        pwm[1, AA_INDEX[aa]] += w
    for aa, w in {"V": 25, "L": 12, "I": 6}.items():
        pwm[8, AA_INDEX[aa]] += w
    return pwm / pwm.sum(axis=1, keepdims=True)


def sample_peptides(n: int, rng: np.random.Generator, exclude: set[str] = frozenset()) -> list[str]:
    pwm, out, seen = anchor_pwm(), [], set(exclude)
    while len(out) < n:
        pep = "".join(AA[rng.choice(len(AA), p=pwm[i])] for i in range(PEP_LEN))
        if pep not in seen:
            seen.add(pep)
            out.append(pep)
    return out


# ---------------------------------------------------------------- residue compatibility
# BLOSUM62 (Henikoff & Henikoff 1992, PNAS 89:10915), as distributed by NCBI
# (ftp.ncbi.nih.gov/blast/matrices/BLOSUM62), rows/columns in the order below.
_BLOSUM62_ORDER = "ARNDCQEGHILKMFPSTWYV"
_BLOSUM62_ROWS = """
 4 -1 -2 -2  0 -1 -1  0 -2 -1 -1 -1 -1 -2 -1  1  0 -3 -2  0
-1  5  0 -2 -3  1  0 -2  0 -3 -2  2 -1 -3 -2 -1 -1 -3 -2 -3
-2  0  6  1 -3  0  0  0  1 -3 -3  0 -2 -3 -2  1  0 -4 -2 -3
-2 -2  1  6 -3  0  2 -1 -1 -3 -4 -1 -3 -3 -1  0 -1 -4 -3 -3
 0 -3 -3 -3  9 -3 -4 -3 -3 -1 -1 -3 -1 -2 -3 -1 -1 -2 -2 -1
-1  1  0  0 -3  5  2 -2  0 -3 -2  1  0 -3 -1  0 -1 -2 -1 -2
-1  0  0  2 -4  2  5 -2  0 -3 -3  1 -2 -3 -1  0 -1 -3 -2 -2
 0 -2  0 -1 -3 -2 -2  6 -2 -4 -4 -2 -3 -3 -2  0 -2 -2 -3 -3
-2  0  1 -1 -3  0  0 -2  8 -3 -3 -1 -2 -1 -2 -1 -2 -2  2 -3
-1 -3 -3 -3 -1 -3 -3 -4 -3  4  2 -3  1  0 -3 -2 -1 -3 -1  3
-1 -2 -3 -4 -1 -2 -3 -4 -3  2  4 -2  2  0 -3 -2 -1 -2 -1  1
-1  2  0 -1 -3  1  1 -2 -1 -3 -2  5 -1 -3 -1  0 -1 -3 -2 -2
-1 -1 -2 -3 -1  0 -2 -3 -2  1  2 -1  5  0 -2 -1 -1 -1 -1  1
-2 -3 -3 -3 -2 -3 -3 -3 -1  0  0 -3  0  6 -4 -2 -2  1  3 -1
-1 -2 -2 -1 -3 -1 -1 -2 -2 -3 -3 -1 -2 -4  7 -1 -1 -4 -3 -2
 1 -1  1  0 -1  0  0  0 -1 -2 -2  0 -1 -2 -1  4  1 -3 -2 -2
 0 -1  0 -1 -1 -1 -1 -2 -2 -1 -1 -1 -1 -2 -1  1  5 -2 -2  0
-3 -3 -4 -4 -2 -2 -3 -2 -2 -3 -2 -3 -1  1 -4 -3 -2 11  2 -3
-2 -2 -2 -3 -2 -1 -2 -3  2 -1 -1 -2 -1  3 -3 -2 -2  2  7 -1
 0 -3 -3 -3 -1 -2 -2 -3 -3  3  1 -2  1 -1 -2 -2  0 -3 -1  4
"""


def blosum62() -> np.ndarray:
    """BLOSUM62 as a (20, 20) array in this module's ``AA`` order."""
    table = np.array([row.split() for row in _BLOSUM62_ROWS.strip().splitlines()], dtype=float)
    order = [_BLOSUM62_ORDER.index(a) for a in AA]
    return table[np.ix_(order, order)]


def standardised_blosum62() -> np.ndarray:
    """BLOSUM62 shifted and scaled to zero mean and unit variance over its 400 entries."""
    b = blosum62()
    return (b - b.mean()) / b.std()


# ---------------------------------------------------------------- hidden binding energy
def make_oracle(seed: int, n_contacts: int, n_intra: int, intra_scale: float) -> dict[str, np.ndarray]:
    """Standardised BLOSUM62 as residue compatibility, a sparse CDR3-middle x peptide P4-P8
    contact map, and sparse CDR3-middle x CDR3-middle couplings (so the optimum of a design is
    not separable by position and decoding order can matter)."""
    rng = np.random.default_rng(seed + 1000)
    contacts = np.zeros((CDR3_MIDDLE, len(PEP_CONTACT)))
    contacts.flat[rng.choice(contacts.size, size=n_contacts, replace=False)] = \
        rng.uniform(0.5, 1.5, size=n_contacts)
    upper = np.flatnonzero(np.triu(np.ones((CDR3_MIDDLE, CDR3_MIDDLE)), k=1))
    intra = np.zeros((CDR3_MIDDLE, CDR3_MIDDLE))
    intra.flat[rng.choice(upper, size=n_intra, replace=False)] = \
        intra_scale * rng.uniform(0.5, 1.5, size=n_intra)
    return {"matrix": standardised_blosum62(), "contacts": contacts, "intra": intra}


def cdr3_middle(cdr3: str) -> str:
    start = (len(cdr3) - CDR3_MIDDLE) // 2
    return cdr3[start:start + CDR3_MIDDLE]


def middle_ids(cdr3s: list[str]) -> np.ndarray:
    return np.array([[AA_INDEX[a] for a in cdr3_middle(c)] for c in cdr3s]).reshape(-1, CDR3_MIDDLE)


def intra_energy(mid: np.ndarray, oracle: dict[str, np.ndarray]) -> np.ndarray:
    """sum_{i<k} u_ik M[mid_i, mid_k] for (N, 5) residue ids: a TCR-only, epitope-free term."""
    pair = oracle["matrix"][mid[:, :, None], mid[:, None, :]]                      # (N, 5, 5)
    return (pair * oracle["intra"][None]).sum(axis=(1, 2))


def cross_unary(peptide: str, oracle: dict[str, np.ndarray]) -> np.ndarray:
    """(5, 20): the contact energy each residue would get at each CDR3-middle position."""
    pep = np.array([AA_INDEX[a] for a in peptide])[PEP_CONTACT]
    return oracle["contacts"] @ oracle["matrix"][:, pep].T


def energy(cdr3s: list[str], peptide: str, oracle: dict[str, np.ndarray]) -> np.ndarray:
    """E = sum_ij w_ij M[mid_i, pep_j] + sum_{i<k} u_ik M[mid_i, mid_k]; higher = stronger."""
    mid = middle_ids(cdr3s)
    unary = cross_unary(peptide, oracle)
    cross = unary[np.arange(CDR3_MIDDLE)[None], mid].sum(axis=1)
    return cross + intra_energy(mid, oracle)


def exhaustive_optimum(peptide: str, oracle: dict[str, np.ndarray]) -> float:
    """max over all 20^5 CDR3 middles of the energy (closed enumeration)."""
    unary, m, u = cross_unary(peptide, oracle), oracle["matrix"], oracle["intra"]
    n = CDR3_MIDDLE
    total = np.zeros((20,) * n)
    for i in range(n):
        total = total + unary[i].reshape([20 if a == i else 1 for a in range(n)])
        for k in range(i + 1, n):
            if u[i, k]:
                shape = [20 if a in (i, k) else 1 for a in range(n)]
                total = total + (u[i, k] * m).reshape(shape)
    return float(total.max())


def greedy_left_to_right(peptide: str, oracle: dict[str, np.ndarray]) -> float:
    """Energy of the middle built left to right, each residue maximising the terms it closes
    with the residues already fixed (what a reading-order decoder that knew the oracle does)."""
    unary, m, u = cross_unary(peptide, oracle), oracle["matrix"], oracle["intra"]
    chosen: list[int] = []
    for i in range(CDR3_MIDDLE):
        gain = unary[i] + sum(u[k, i] * m[chosen[k]] for k in range(i))
        chosen.append(int(np.argmax(gain)))
    mid = np.array([chosen])
    return float(unary[np.arange(CDR3_MIDDLE), chosen].sum() + intra_energy(mid, oracle)[0])


def order_premise(epitopes: list[str], oracle: dict[str, np.ndarray]) -> dict[str, float]:
    """Premise of the decoding claim: how often (and by how much, in energy units) left-to-right
    greedy misses the exhaustive optimum."""
    gaps = np.array([exhaustive_optimum(p, oracle) - greedy_left_to_right(p, oracle) for p in epitopes])
    return {"oracle_greedy_suboptimal_fraction": float((gaps > 1e-9).mean()),
            "oracle_greedy_gap": float(gaps.mean())}


def tilted_subset(scores: np.ndarray, n: int, beta: float, rng: np.random.Generator) -> np.ndarray:
    """Indices of ``n`` of the candidates drawn without replacement with probability
    proportional to exp(beta * z-scored score) (Gumbel top-k)."""
    z = (scores - scores.mean()) / (scores.std() + 1e-12)
    keys = beta * z + rng.gumbel(size=len(scores))
    return np.sort(np.argsort(-keys)[:n])


def coherence(ids: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Mean compatibility of all residue pairs of each row of (N, L) residue ids."""
    pair = matrix[ids[:, :, None], ids[:, None, :]]
    iu = np.triu_indices(ids.shape[1], k=1)
    return pair[:, iu[0], iu[1]].mean(axis=1)


def peptide_coherence(peptides: list[str], matrix: np.ndarray) -> np.ndarray:
    """Mean compatibility of all residue pairs among P4-P8 of each peptide."""
    return coherence(np.array([[AA_INDEX[a] for a in p] for p in peptides])[:, PEP_CONTACT], matrix)


def interface_compatibility(cdr3s: list[str], peptide: str, matrix: np.ndarray) -> np.ndarray:
    """Mean compatibility of every CDR3-middle x P4-P8 residue pair: the residue rule alone,
    applied to the interface with no contact map and no fitted weight."""
    pep = np.array([AA_INDEX[a] for a in peptide])[PEP_CONTACT]
    return matrix[middle_ids(cdr3s)][:, :, pep].mean(axis=(1, 2))


def tcr_score(cdr3s: list[str], oracle: dict[str, np.ndarray], kind: str) -> np.ndarray:
    """What shapes the marginal TCR corpus: ``intra`` = the oracle's own sparse CDR3-CDR3 term
    (v2); ``dense`` = the mean compatibility of all residue pairs of the CDR3 middle."""
    if kind == "intra":
        return intra_energy(middle_ids(cdr3s), oracle)
    if kind == "dense":
        return coherence(middle_ids(cdr3s), oracle["matrix"])
    raise ValueError(f"data.marginal_tcr_score must be intra or dense (got {kind!r})")


# ---------------------------------------------------------------- stages
def oracle_of(d) -> dict[str, np.ndarray]:
    return make_oracle(d.seed, d.contacts, d.intra_pairs, d.intra_scale)


def build_marginal_stage(cfg, ctx) -> None:
    """Unpaired CDR3s and peptides. Both are tilted towards BLOSUM-compatible residue pairs
    (CDR3s by the oracle's own CDR3-CDR3 term, peptides by P4-P8 coherence): the marginal
    data carry the residue-compatibility rule, never a TCR-epitope pair."""
    torch.set_num_threads(1)
    if cfg.paper.source == "tables":
        return build_marginal_tables(cfg, ctx)
    d = cfg.data
    rng = np.random.default_rng(d.seed)
    oracle = oracle_of(d)
    pool = sample_cdr3b(d.marginal_oversample * d.n_marginal_tcr, d.seed, d.cdr3_min_len,
                        d.cdr3_max_len)
    keep = tilted_subset(tcr_score(pool["cdr3"], oracle, d.marginal_tcr_score), d.n_marginal_tcr,
                         d.marginal_tilt, rng)
    tcrs = {k: [v[i] for i in keep] for k, v in pool.items()}
    peptides = sample_peptides(d.marginal_oversample * d.n_marginal_pep, rng)
    keep_pep = tilted_subset(peptide_coherence(peptides, oracle["matrix"]), d.n_marginal_pep,
                             d.marginal_tilt, rng)
    peptides = [peptides[i] for i in keep_pep]
    write_table(ctx.out_dir / "marginal_tcr.parquet", tcrs)
    write_table(ctx.out_dir / "marginal_pep.parquet", {"peptide": peptides})
    ctx.write_metrics({"n_tcr": len(tcrs["cdr3"]), "n_pep": len(peptides),
                       "mean_cdr3_len": float(np.mean([len(c) for c in tcrs["cdr3"]])),
                       "tcr_intra_energy_mean": float(intra_energy(middle_ids(tcrs["cdr3"]), oracle).mean()),
                       "pep_coherence_mean": float(peptide_coherence(peptides, oracle["matrix"]).mean())})


def assign_binders(z: np.ndarray, noise: np.ndarray, sigma: float, quantile: float,
                   per_epitope: int, rng: np.random.Generator) -> dict[int, np.ndarray]:
    """Pool indices of the planted binders of each epitope (a TCR binds at most one epitope).

    ``z`` (K, N) is the per-epitope standardised energy; sigma scales fixed label noise, so a
    larger sigma makes the planted signal weaker (noisier labels, as in real assays)."""
    noisy = z + sigma * noise
    passes = noisy >= np.quantile(noisy, quantile, axis=1, keepdims=True)
    best = np.where(passes, noisy, -np.inf).argmax(axis=0)      # strongest epitope per TCR
    binders = {}
    for e in range(z.shape[0]):
        idx = np.flatnonzero(passes[e] & (best == e))
        binders[e] = rng.permutation(idx)[:per_epitope]
    return binders


def make_pairs(binders: dict[int, np.ndarray], n_pool: int, rng: np.random.Generator) -> dict:
    """Positives + swapped negatives (binder of e with another epitope) + background negatives
    (a non-binder with e), one of each per positive so the TCR length mix is matched."""
    k = len(binders)
    any_binder = np.zeros(n_pool, bool)
    for idx in binders.values():
        any_binder[idx] = True
    background = rng.permutation(np.flatnonzero(~any_binder))
    epi, tcr, label, kind = [], [], [], []
    cursor = 0
    for e, idx in binders.items():
        for t in idx:
            other = (e + 1 + rng.integers(k - 1)) % k
            epi += [e, other, e]
            tcr += [t, t, background[cursor]]
            label += [1, 0, 0]
            kind += ["positive", "swapped", "background"]
            cursor += 1
    return {"epitope_id": np.array(epi), "tcr_id": np.array(tcr), "label": np.array(label),
            "kind": np.array(kind)}


def assign_splits(pairs: dict, n_epitopes: int, d, rng: np.random.Generator) -> np.ndarray:
    """Epitope-held-out, then TCR-held-out (and a validation set of TCRs), then random pairs."""
    heldout_epi = rng.choice(n_epitopes, size=d.n_heldout_epitopes, replace=False)
    tcrs = rng.permutation(np.unique(pairs["tcr_id"]))
    n_test, n_val = int(d.heldout_tcr_fraction * len(tcrs)), int(d.val_tcr_fraction * len(tcrs))
    test_tcr, val_tcr = set(tcrs[:n_test]), set(tcrs[n_test:n_test + n_val])
    split = np.array(["train"] * len(pairs["label"]), dtype=object)
    for i, (e, t) in enumerate(zip(pairs["epitope_id"], pairs["tcr_id"])):
        if e in heldout_epi:
            split[i] = "test_epitope"
        elif t in test_tcr:
            split[i] = "test_tcr"
        elif t in val_tcr:
            split[i] = "val"
        elif rng.random() < d.random_test_fraction:
            split[i] = "test_random"
    # a held-out-epitope pair whose TCR is a TCR-held-out one stays out of training either way
    return split.astype(str)


def contact_features(cdr3s: list[str], peptides: list[str]):
    """Sparse one-hot of every (CDR3-middle position, residue) x (peptide P4-P8 position, residue)
    and every pair of CDR3-middle (position, residue): the oracle's terms, weights unknown."""
    from scipy.sparse import csr_matrix

    rows, cols = [], []
    for r, (c, p) in enumerate(zip(cdr3s, peptides)):
        mid, pep = cdr3_middle(c), p[3:8]
        for i, a in enumerate(mid):
            for j, b in enumerate(pep):
                rows.append(r)
                cols.append(((i * 20 + AA_INDEX[a]) * 5 + j) * 20 + AA_INDEX[b])
            for k in range(i + 1, len(mid)):
                rows.append(r)
                cols.append(10_000 + ((i * 20 + AA_INDEX[a]) * 5 + k) * 20 + AA_INDEX[mid[k]])
    return csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(cdr3s), 2 * 100 * 100))


def supervised_val_auroc(pairs: dict, split: np.ndarray, pool: list[str], epitopes: list[str]) -> float:
    """A supervised logistic classifier on contact features, trained on train, scored on val."""
    from sklearn.linear_model import LogisticRegression

    from components.common.metrics import auroc

    cdr3 = [pool[t] for t in pairs["tcr_id"]]
    pep = [epitopes[e] for e in pairs["epitope_id"]]
    x = contact_features(cdr3, pep)
    tr, va = split == "train", split == "val"
    clf = LogisticRegression(C=0.3, max_iter=500).fit(x[tr], pairs["label"][tr])
    return auroc(clf.decision_function(x[va]), pairs["label"][va])


def write_pairs(out_dir, pairs: dict, split: np.ndarray, pool: dict, epitopes: list[str]) -> None:
    """``paired.parquet`` (one row per pair, sequences resolved) and the TCR ``pool.parquet``."""
    write_table(out_dir / "paired.parquet", {
        "epitope": [epitopes[e] for e in pairs["epitope_id"]], "epitope_id": pairs["epitope_id"],
        "cdr3": [pool["cdr3"][t] for t in pairs["tcr_id"]], "tcr_id": pairs["tcr_id"],
        "v": [pool["v"][t] for t in pairs["tcr_id"]], "j": [pool["j"][t] for t in pairs["tcr_id"]],
        "label": pairs["label"], "kind": pairs["kind"], "split": split})
    write_table(out_dir / "pool.parquet", pool)


def build_paired_stage(cfg, ctx) -> None:
    torch.set_num_threads(1)
    if cfg.paper.source == "tables":
        return build_paired_tables(cfg, ctx)
    from components.common.io import read_table

    d = cfg.data
    marginal = ctx.inputs["build_marginal"]
    seen_tcr = set(read_table(marginal / "marginal_tcr.parquet").column("cdr3").to_pylist())
    seen_pep = set(read_table(marginal / "marginal_pep.parquet").column("peptide").to_pylist())
    # the pool is disjoint from the marginal corpus, so no held-out TCR was seen in S1
    drawn = sample_cdr3b(d.n_pool_tcr + len(seen_tcr) // 2 + 200, d.seed + 1, d.cdr3_min_len,
                         d.cdr3_max_len)
    keep = [i for i, c in enumerate(drawn["cdr3"]) if c not in seen_tcr][:d.n_pool_tcr]
    pool = {k: [v[i] for i in keep] for k, v in drawn.items()}
    rng = np.random.default_rng(d.seed + 2)
    epitopes = sample_peptides(d.n_epitopes, rng, exclude=seen_pep)
    oracle = oracle_of(d)
    e_pool = np.stack([energy(pool["cdr3"], p, oracle) for p in epitopes])      # (K, N)
    z = (e_pool - e_pool.mean(1, keepdims=True)) / e_pool.std(1, keepdims=True)
    noise = rng.standard_normal(z.shape)

    def dataset(sigma: float):
        r = np.random.default_rng(d.seed + 3)  # same draws for every sigma
        pairs = make_pairs(assign_binders(z, noise, sigma, d.binder_quantile,
                                          d.positives_per_epitope, r), len(pool["cdr3"]), r)
        return pairs, assign_splits(pairs, d.n_epitopes, d, r)

    # calibrate the planted-signal strength once, on validation TCRs only
    calibration = {s: supervised_val_auroc(*dataset(s), pool["cdr3"], epitopes) for s in d.noise_grid}
    sigma = min(calibration, key=lambda s: abs(calibration[s] - d.target_supervised_auroc))
    pairs, split = dataset(sigma)
    write_pairs(ctx.out_dir, pairs, split, pool, epitopes)
    threshold = np.quantile(e_pool, d.binder_quantile, axis=1)                  # noise-free binder cut
    save_torch(ctx.out_dir / "oracle.pt", {**oracle, "epitopes": epitopes, "pool_energy": e_pool,
                                           "binder_threshold": threshold})
    write_json_atomic(ctx.out_dir / "calibration.json",
                      {"sigma": sigma, "val_auroc_by_sigma": {str(k): v for k, v in calibration.items()}})
    counts = {s: int((split == s).sum()) for s in np.unique(split)}
    ctx.write_metrics({"premise_interface_compat_macro_auroc":
                       compat_auroc(pairs, split, pool["cdr3"], epitopes, oracle["matrix"]),
                       "label_noise_sigma": sigma, "supervised_val_auroc": calibration[sigma],
                       "n_pairs": int(len(split)), "n_positive": int(pairs["label"].sum()),
                       **order_premise(epitopes, oracle),
                       **{f"n_{s}": n for s, n in counts.items()}})


def compat_auroc(pairs: dict, split: np.ndarray, pool: list[str], epitopes: list[str],
                 matrix: np.ndarray) -> float:
    """Macro AUROC (over epitopes) of the model-free interface compatibility on the train and
    validation pairs: does the residue rule the marginal data carry rank binders?"""
    from components.common.metrics import auroc

    keep = np.isin(split, ["train", "val"])
    values = []
    for e in np.unique(pairs["epitope_id"][keep]):
        rows = np.flatnonzero(keep & (pairs["epitope_id"] == e))
        labels = pairs["label"][rows]
        if 0 < labels.sum() < len(labels):
            score = interface_compatibility([pool[t] for t in pairs["tcr_id"][rows]], epitopes[e], matrix)
            values.append(auroc(score, labels))
    return float(np.mean(values))


# ---------------------------------------------------------------- paper profile: published tables
def build_marginal_tables(cfg, ctx) -> None:
    """The marginal corpus from repertoire and ligand tables; the rest of the repertoire is kept
    as background negatives for ``build_paired``."""
    from components.decodertcr.tables import marginal_from_tables

    tcrs, peptides, background = marginal_from_tables(cfg.paper, cfg.data, np.random.default_rng(cfg.data.seed))
    write_table(ctx.out_dir / "marginal_tcr.parquet", tcrs)
    write_table(ctx.out_dir / "marginal_pep.parquet", {"peptide": peptides})
    write_table(ctx.out_dir / "background_tcr.parquet", background)
    ctx.write_metrics({"n_tcr": len(tcrs["cdr3"]), "n_pep": len(peptides),
                       "n_background_tcr": len(background["cdr3"]),
                       "mean_cdr3_len": float(np.mean([len(c) for c in tcrs["cdr3"]]))})


def build_paired_tables(cfg, ctx) -> None:
    """VDJdb positives with swapped and background negatives, split as in the synthetic world
    (epitope-held-out, TCR-held-out, validation TCRs, random pairs). No oracle exists here."""
    from components.common.io import read_table
    from components.decodertcr.tables import pairs_from_tables

    d = cfg.data
    rng = np.random.default_rng(d.seed + 2)
    background = read_table(ctx.inputs["build_marginal"] / "background_tcr.parquet").to_pydict()
    pairs, pool, epitopes = pairs_from_tables(cfg.paper, d, background, rng)
    split = assign_splits(pairs, len(epitopes), d, rng)
    write_pairs(ctx.out_dir, pairs, split, pool, epitopes)
    counts = {s: int((split == s).sum()) for s in np.unique(split)}
    ctx.write_metrics({"n_pairs": int(len(split)), "n_positive": int(pairs["label"].sum()),
                       "n_epitopes": len(epitopes), **{f"n_{s}": n for s, n in counts.items()}})
