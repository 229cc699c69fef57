"""The two embedded tasks: sklearn digits (MLP) and a byte-level LM on stdlib docstrings.

Everything is generated offline: digits ship with scikit-learn, the docstrings are parsed
(with ``ast``, never imported) from the running interpreter's standard library.
"""
from __future__ import annotations

import ast
import hashlib
import math
import sysconfig
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

# -- digits ----------------------------------------------------------------------------------

def digits_splits(val_frac: float, test_frac: float, split_seed: int) -> dict[str, np.ndarray]:
    """Stratified train/val/test split of sklearn digits, standardised with train statistics."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    x_rest, x_test, y_rest, y_test = train_test_split(
        x, y, test_size=test_frac, stratify=y, random_state=split_seed)
    x_train, x_val, y_train, y_val = train_test_split(
        x_rest, y_rest, test_size=val_frac / (1 - test_frac), stratify=y_rest, random_state=split_seed)
    mean, std = x_train.mean(0), x_train.std(0)
    std[std < 1e-3] = 1.0      # border pixels that are constant in train: leave unscaled
    norm = lambda a: ((a - mean) / std).astype(np.float32)
    return {"x_train": norm(x_train), "y_train": y_train, "x_val": norm(x_val), "y_val": y_val,
            "x_test": norm(x_test), "y_test": y_test}


class MLP(nn.Module):
    def __init__(self, sizes: list[int]):
        super().__init__()
        layers: list[nn.Module] = []
        for i, (d_in, d_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(d_in, d_out))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def epoch_batches(x: np.ndarray, y: np.ndarray, batch_size: int, rng: np.random.Generator
                  ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Shuffled mini-batches, forever (a new permutation every epoch; last partial batch dropped)."""
    xt, yt = torch.from_numpy(x), torch.from_numpy(y).long()
    while True:
        order = torch.from_numpy(rng.permutation(len(x)))
        for start in range(0, len(x) - batch_size + 1, batch_size):
            idx = order[start:start + batch_size]
            yield xt[idx], yt[idx]


def classify_loss(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


@torch.no_grad()
def digits_scores(model: nn.Module, x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    logits = model(torch.from_numpy(x))
    labels = torch.from_numpy(y).long()
    return {"acc": float((logits.argmax(-1) == labels).float().mean()),
            "loss": float(F.cross_entropy(logits, labels))}


# -- stdlib docstring corpus -------------------------------------------------------------------

def stdlib_files() -> list[Path]:
    """Source files of the standard library, skipping tests, GUI and site-packages."""
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idle_test", "site-packages", "dist-packages", "idlelib", "tkinter",
            "turtledemo", "lib2to3", "__pycache__", "ensurepip", "venv"}
    return sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts))


def module_docstrings(path: Path) -> str:
    """Module, class and function docstrings of one source file, blank-line separated."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return ""
    nodes = [tree] + [n for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    docs = [ast.get_docstring(n) for n in nodes]
    return "\n\n".join(d for d in docs if d) + ("\n\n" if any(docs) else "")


def split_of(module_name: str, val_frac: float, test_frac: float) -> str:
    """Whole modules go to one split, decided by a stable hash of the module's name."""
    u = int(hashlib.sha1(module_name.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "val" if u < val_frac else "test" if u < val_frac + test_frac else "train"


def docstring_corpus(max_bytes: int, val_frac: float, test_frac: float) -> dict[str, bytes]:
    """Bytes of each split. Files are taken in sorted order until train holds ``max_bytes``."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts: dict[str, list[bytes]] = {"train": [], "val": [], "test": []}
    sizes = dict.fromkeys(parts, 0)
    budget = {"train": max_bytes, "val": max(1, int(max_bytes * val_frac / (1 - val_frac - test_frac))),
              "test": max(1, int(max_bytes * test_frac / (1 - val_frac - test_frac)))}
    for path in stdlib_files():
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        split = split_of(name, val_frac, test_frac)
        if sizes[split] >= budget[split]:
            if all(sizes[s] >= budget[s] for s in parts):
                break
            continue
        text = module_docstrings(path).encode("utf-8")
        parts[split].append(text)
        sizes[split] += len(text)
    return {k: b"".join(v) for k, v in parts.items()}


# -- byte-level transformer LM -------------------------------------------------------------------

class Block(nn.Module):
    """Pre-norm causal self-attention + MLP; every projection is an nn.Linear (so IO-Adam sees it)."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.fc1, self.fc2 = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        bsz, seq, d = h.shape
        q, k, v = self.qkv(self.ln1(h)).split(d, dim=-1)
        heads = lambda t: t.view(bsz, seq, self.n_heads, d // self.n_heads).transpose(1, 2)
        att = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        h = h + self.proj(att.transpose(1, 2).reshape(bsz, seq, d))
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))


class CharLM(nn.Module):
    def __init__(self, vocab: int = 256, d_model: int = 128, n_heads: int = 4, n_layers: int = 2,
                 seq_len: int = 64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            h = block(h)
        return self.head(self.ln_f(h))


def lm_batches(data: torch.Tensor, batch_size: int, seq_len: int, gen: torch.Generator
               ) -> Iterator[torch.Tensor]:
    """Random windows of seq_len + 1 bytes (input and shifted target), forever."""
    while True:
        starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=gen)
        yield torch.stack([data[s:s + seq_len + 1] for s in starts.tolist()]).long()


def lm_loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    out = model(batch[:, :-1])
    logits = getattr(out, "logits", out)          # transformers models return a ModelOutput
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


@torch.no_grad()
def lm_eval_loss(model: nn.Module, data: torch.Tensor, seq_len: int, max_windows: int,
                 batch_size: int = 64) -> float:
    """Mean next-byte loss over non-overlapping windows from the start of ``data`` (deterministic)."""
    n = min(max_windows, (len(data) - 1) // seq_len)
    windows = torch.stack([data[i * seq_len:(i + 1) * seq_len + 1] for i in range(n)]).long()
    total = 0.0
    for chunk in windows.split(batch_size):
        total += float(lm_loss(model, chunk)) * len(chunk)
    return total / n


def perplexity(loss: float) -> float:
    """exp of a mean next-token loss (per byte for the byte model, per token for LLaMA)."""
    return math.exp(loss) if math.isfinite(loss) and loss < 700 else math.inf
