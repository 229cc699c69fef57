"""Character vocabulary, the ``<cls> peptide <sep> CDR3 <eos>`` layout, and MLM masking.

Special tokens (pad, cls, sep, eos, mask) are never masked and never predicted; the model
predicts only the 20 amino acids.
"""
from __future__ import annotations

import torch

from components.decodertcr.corpus import AA, PEP_LEN

PAD, CLS, SEP, EOS, MASK = 0, 1, 2, 3, 4
N_SPECIAL = 5
VOCAB_SIZE = N_SPECIAL + len(AA)
MAX_LEN = 1 + 9 + 1 + 18 + 1
REGION_SPECIAL, REGION_PEPTIDE, REGION_CDR3 = 0, 1, 2


def aa_ids(seq: str) -> list[int]:
    return [N_SPECIAL + AA.index(a) for a in seq]


def encode(peptide: str, cdr3: str, max_len: int = MAX_LEN) -> tuple[list[int], list[int]]:
    """Token ids and region ids of one complex; either component may be empty (marginal data).
    An absent peptide is a run of PAD tokens, so a CDR3 sits at the same positions alone as in
    a complex (what the marginal model learns about CDR3 positions carries over)."""
    pep_ids = aa_ids(peptide) if peptide else [PAD] * PEP_LEN
    tokens = [CLS] + pep_ids + [SEP] + aa_ids(cdr3) + [EOS]
    region = ([REGION_SPECIAL] + [REGION_PEPTIDE] * len(peptide) + [REGION_SPECIAL] * (len(pep_ids) - len(peptide))
              + [REGION_SPECIAL] + [REGION_CDR3] * len(cdr3) + [REGION_SPECIAL])
    pad = max_len - len(tokens)
    if pad < 0:
        raise ValueError(f"complex of length {len(tokens)} exceeds {max_len}")
    return tokens + [PAD] * pad, region + [REGION_SPECIAL] * pad


def sequence_width(cfg) -> int:
    """Padded complex length: the synthetic layout's fixed width, or, for published tables,
    room for the longest kept peptide and CDR3 (an absent peptide takes ``PEP_LEN`` pads)."""
    if cfg.paper.source != "tables":
        return MAX_LEN
    return 1 + max(cfg.paper.max_peptide_len, PEP_LEN) + 1 + cfg.data.cdr3_max_len + 1


def encode_many(peptides: list[str], cdr3s: list[str], max_len: int = MAX_LEN
                ) -> tuple[torch.Tensor, torch.Tensor]:
    pairs = [encode(p, c, max_len) for p, c in zip(peptides, cdr3s)]
    return (torch.tensor([t for t, _ in pairs], dtype=torch.long),
            torch.tensor([r for _, r in pairs], dtype=torch.long))


def decode_region(tokens: torch.Tensor, region: torch.Tensor, which: int) -> str:
    return "".join(AA[int(t) - N_SPECIAL] for t, r in zip(tokens, region) if int(r) == which)


def mask_batch(tokens: torch.Tensor, region: torch.Tensor, rate: float, segment_prob: float,
               gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """MLM corruption: per row either mask one whole segment (peptide or CDR3, whichever is
    present) plus Bernoulli(rate) elsewhere, or Bernoulli(rate) everywhere. Only residue
    positions are eligible. Returns (inputs, targets) with targets = -100 where not masked and
    the amino-acid index (0..19) where masked."""
    residue = region > REGION_SPECIAL
    masked = (torch.rand(tokens.shape, generator=gen) < rate) & residue
    segment_rows = torch.rand(tokens.shape[0], generator=gen) < segment_prob
    has_pep = (region == REGION_PEPTIDE).any(1)
    has_cdr3 = (region == REGION_CDR3).any(1)
    pick_pep = torch.rand(tokens.shape[0], generator=gen) < 0.5
    pick_pep = torch.where(has_pep & has_cdr3, pick_pep, has_pep)
    segment = torch.where(pick_pep, REGION_PEPTIDE, REGION_CDR3)[:, None]
    masked |= segment_rows[:, None] & (region == segment)
    # every row learns something: rows with nothing masked get one random residue masked
    empty = ~masked.any(1)
    if empty.any():
        noise = torch.rand(tokens.shape, generator=gen).masked_fill(~residue, -1.0)
        masked[empty, noise[empty].argmax(1)] = True
    inputs = tokens.masked_fill(masked, MASK)
    targets = torch.where(masked, tokens - N_SPECIAL, torch.full_like(tokens, -100))
    return inputs, targets
