"""Tiny published-layout tables for decodertcr's paper profile, generated (never downloaded):
a 50-row VDJdb slim table, two AIRR repertoire TSVs and a peptide-ligand table. CDR3s are OLGA
human TRB draws, so OLGA Pgen of them is finite."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from components.decodertcr.corpus import AA, sample_cdr3b

VDJDB_HEADER = ("gene", "cdr3", "species", "antigen.epitope", "antigen.gene", "antigen.species",
                "complex.id", "v.segm", "j.segm", "v.end", "j.start", "mhc.a", "mhc.b", "mhc.class",
                "reference.id", "vdjdb.score")
AIRR_HEADER = ("sequence_id", "productive", "v_call", "j_call", "junction_aa")
EPITOPES = ("GILGFVFTL", "NLVPMVATV", "GLCTLVAML", "YLQPRTFLL", "KLGGALQAK")


def _write(path: Path, header: tuple[str, ...], rows: list[tuple]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\t".join(header) + "\n" + "".join("\t".join(map(str, r)) + "\n" for r in rows))


def write_tables(root: Path, per_epitope: int = 9, n_repertoire: int = 300, n_ligands: int = 200,
                 seed: int = 0) -> Path:
    """``root/vdjdb.slim.txt`` (50 rows: 45 kept TRB human binders, 5 rows the filters drop),
    ``root/repertoire/{a,b}.tsv`` and ``root/ligands.tsv``."""
    rng = np.random.default_rng(seed)
    tcrs = sample_cdr3b(len(EPITOPES) * per_epitope + n_repertoire, seed, 10, 18)
    rows = []
    for k, epitope in enumerate(EPITOPES):
        for i in range(k * per_epitope, (k + 1) * per_epitope):
            rows.append(("TRB", tcrs["cdr3"][i], "HomoSapiens", epitope, "M", "InfluenzaA", 0,
                         f"{tcrs['v'][i]}*01", f"{tcrs['j'][i]}*01", -1, -1, "HLA-A*02:01", "B2M",
                         "MHCI", "PMID:0", int(rng.integers(0, 4))))
    dropped = [("TRA", "CAVRDSNYQLIW", "HomoSapiens"), ("TRA", "CAASGGSYIPTF", "HomoSapiens"),
               ("TRB", "CASSIRSSYEQYF", "MusMusculus"), ("TRB", "CASSLGQAYEQYF", "MusMusculus"),
               ("TRB", "CASSXXLF", "HomoSapiens")]             # non-amino-acid CDR3
    for gene, cdr3, species in dropped:
        rows.append((gene, cdr3, species, EPITOPES[0], "M", "InfluenzaA", 0, "TRBV1*01",
                     "TRBJ1-1*01", -1, -1, "HLA-A*02:01", "B2M", "MHCI", "PMID:0", 1))
    _write(Path(root) / "vdjdb.slim.txt", VDJDB_HEADER, rows)
    start = len(EPITOPES) * per_epitope
    rep = [(f"s{i}", "T", f"{tcrs['v'][i]}*01", f"{tcrs['j'][i]}*01", tcrs["cdr3"][i])
           for i in range(start, start + n_repertoire)]
    rep.append(("dup", "T", "TRBV2*01", "TRBJ2-1*01", tcrs["cdr3"][0]))   # a VDJdb binder: removed
    half = len(rep) // 2
    _write(Path(root) / "repertoire" / "a.tsv", AIRR_HEADER, rep[:half])
    _write(Path(root) / "repertoire" / "b.tsv", AIRR_HEADER, rep[half:])
    ligands = ["".join(rng.choice(list(AA), size=int(rng.integers(8, 12)))) for _ in range(n_ligands)]
    _write(Path(root) / "ligands.tsv", ("peptide", "allele"),
           [(p, "HLA-A*02:01") for p in ligands + [EPITOPES[1]]])          # an epitope: removed
    return Path(root)
