"""A small bidirectional transformer encoder for masked-LM over TCR-pMHC complexes (synthetic
world), an ESM-2 checkpoint behind the same interface (paper profile), and the masked-peptide
pseudo-log-likelihood used as a zero-shot binding score.

(The shared ``components.common.transformer`` is causal; an MLM needs full attention, so the
encoder here is built from torch's ``TransformerEncoderLayer``.)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from components.decodertcr.tokens import (MASK, MAX_LEN, N_SPECIAL, PAD, REGION_PEPTIDE,
                                          VOCAB_SIZE)


class MaskedLM(nn.Module):
    def __init__(self, d_model: int = 64, n_layers: int = 3, n_heads: int = 4, dropout: float = 0.0):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB_SIZE, d_model)
        self.pos_emb = nn.Embedding(MAX_LEN, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.ln_out = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, N_AA, bias=True)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T) token ids -> (B, T, 20) amino-acid logits (specials are never predicted)."""
        x = self.tok_emb(tokens) + self.pos_emb(torch.arange(tokens.shape[1]))
        x = self.encoder(x, src_key_padding_mask=tokens == PAD)
        return self.head(self.ln_out(x))


N_AA = VOCAB_SIZE - N_SPECIAL

# ESM-2's published vocabulary (fair-esm Alphabet / transformers EsmTokenizer vocab.txt order)
ESM2_VOCAB = ("<cls>", "<pad>", "<eos>", "<unk>", "L", "A", "G", "V", "S", "E", "R", "T", "I", "D",
              "P", "K", "Q", "N", "F", "Y", "M", "H", "W", "C", "X", "B", "U", "Z", "O", ".", "-",
              "<null_1>", "<mask>")


def esm_vocab(folder) -> list[str]:
    """The checkpoint's own ``vocab.txt`` when it has one, else ESM-2's published order."""
    from pathlib import Path

    path = Path(folder).expanduser() / "vocab.txt"
    return path.read_text().split() if path.is_file() else list(ESM2_VOCAB)


def esm_id_map(vocab: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(our token id -> ESM id, our 20 amino acids -> ESM ids). The chain separator becomes
    ``<eos>`` (ESM has no separator token; DecoderTCR's separator is optional)."""
    from components.decodertcr.corpus import AA
    from components.decodertcr.tokens import CLS, EOS, MASK, SEP

    index = {tok: i for i, tok in enumerate(vocab)}
    specials = {PAD: "<pad>", CLS: "<cls>", SEP: "<eos>", EOS: "<eos>", MASK: "<mask>"}
    ours = [index[specials[i]] for i in range(N_SPECIAL)] + [index[a] for a in AA]
    return torch.tensor(ours), torch.tensor([index[a] for a in AA])


class EsmMaskedLM(nn.Module):
    """A transformers ``EsmForMaskedLM`` checkpoint behind this module's interface: token ids of
    ``tokens.py`` in, (B, T, 20) amino-acid logits out (fp32, on the input's device). Weights
    stay fp32 (the optimiser's master copy); on CUDA the forward runs under bf16 autocast.
    ESM-2 rescales embeddings by the observed mask ratio (token dropout); that is the model's
    own behaviour and is kept."""

    def __init__(self, folder: str | None = None, device: str = "cpu", esm: nn.Module | None = None):
        super().__init__()
        if esm is None:
            from components.common.hf_models import load_model

            esm = load_model(folder, "masked_lm", device=device, dtype="float32")
        self.esm = esm
        to_esm, aa_ids = esm_id_map(esm_vocab(folder) if folder else list(ESM2_VOCAB))
        self.register_buffer("to_esm", to_esm, persistent=False)
        self.register_buffer("aa_ids", aa_ids, persistent=False)
        self.to(next(self.esm.parameters()).device)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        device = self.to_esm.device
        ids = self.to_esm[tokens.to(device)]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = self.esm(input_ids=ids, attention_mask=(tokens != PAD).long().to(device)).logits
        return logits[..., self.aa_ids].float().to(tokens.device)


def tiny_esm(d_model: int, n_layers: int, n_heads: int, dropout: float = 0.0) -> EsmMaskedLM:
    """A freshly initialised small ESM-2 (transformers ``EsmConfig``: rotary positions, token
    dropout, ESM-2's 33-token vocabulary) behind this module's interface: the paper's model
    family at the small profile's size, trained from scratch here."""
    from components.common.tiny_models import build_tiny

    esm = build_tiny("esm", seed=int(torch.initial_seed()) % 2**31, hidden_size=d_model,
                     num_hidden_layers=n_layers, num_attention_heads=n_heads,
                     intermediate_size=4 * d_model, hidden_dropout_prob=dropout,
                     attention_probs_dropout_prob=dropout, max_position_embeddings=64)
    return EsmMaskedLM(esm=esm.train())


def mlm_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    inputs, targets = batch
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, N_AA), targets.reshape(-1), ignore_index=-100)


@torch.no_grad()
def masked_peptide_pll(model: nn.Module, tokens: torch.Tensor, region: torch.Tensor,
                       batch_size: int = 512) -> torch.Tensor:
    """Mean log p(true residue) over the peptide when the *whole* peptide is masked in one pass
    (partial masking would leak the answer). Higher = more binder-like."""
    model.eval()
    out = []
    for start in range(0, len(tokens), batch_size):
        tok, reg = tokens[start:start + batch_size], region[start:start + batch_size]
        is_pep = reg == REGION_PEPTIDE
        logp = F.log_softmax(model(tok.masked_fill(is_pep, MASK)), dim=-1)
        true = (tok - N_SPECIAL).clamp(min=0)
        per_pos = logp.gather(-1, true[..., None])[..., 0] * is_pep
        out.append(per_pos.sum(1) / is_pep.sum(1))
    return torch.cat(out)


@torch.no_grad()
def positionwise_pll(model: nn.Module, tokens: torch.Tensor, positions: list[int]) -> float:
    """Pseudo-log-likelihood of the residues at ``positions`` of one sequence: each position is
    masked on its own with the rest as context (ESM-style PLL), averaged. ``model`` may be any
    callable from token ids to amino-acid logits."""
    if isinstance(model, nn.Module):
        model.eval()
    batch = tokens.repeat(len(positions), 1)
    rows = torch.arange(len(positions))
    cols = torch.tensor(positions)
    batch[rows, cols] = MASK
    logp = F.log_softmax(model(batch), dim=-1)
    return float(logp[rows, cols, tokens[cols] - N_SPECIAL].mean())
