"""Tiny files in the caft paper profile's layouts: a Gemma Scope-shaped SAE ``params.npz``, a
dictionary_learning ``ae.pt``, the MC task's JSON lines and the emergent-misalignment data."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import yaml

from tests.paper.layouts import sentences, write_jsonl, write_npz


def write_gemma_scope_sae(root: Path, layer: int, d_model: int, d_sae: int = 64, seed: int = 0) -> Path:
    """``layer_<L>/width_16k/average_l0_10/params.npz`` with Gemma Scope's keys and shapes."""
    rng = np.random.default_rng(seed)
    w_dec = rng.normal(size=(d_sae, d_model)).astype(np.float32)
    return write_npz(Path(root) / f"layer_{layer}" / "width_16k" / "average_l0_10" / "params.npz",
                     W_enc=w_dec.T.copy(), W_dec=w_dec, b_enc=np.zeros(d_sae, np.float32),
                     b_dec=np.zeros(d_model, np.float32), threshold=np.full(d_sae, 0.1, np.float32))


def write_dictionary_learning_sae(path: Path, d_model: int, d_sae: int = 64, seed: int = 0) -> Path:
    """A batch-top-k ``ae.pt`` state dict (decoder.weight is [d_model, d_sae])."""
    gen = torch.Generator().manual_seed(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"encoder.weight": torch.randn(d_sae, d_model, generator=gen),
                "decoder.weight": torch.randn(d_model, d_sae, generator=gen),
                "b_dec": torch.zeros(d_model), "k": torch.tensor(8)}, path)
    return path


def write_mcmc(root: Path, n: int = 8, seed: int = 0) -> Path:
    """train/val ambiguous (the cue agrees with the intended answer), val_ood/test_ood not."""
    texts = sentences(4 * n, seed)
    for i, split in enumerate(("train", "val", "val_ood", "test_ood")):
        rows = []
        for j in range(n):
            label = j % 2
            spurious = label if split in ("train", "val") else 1 - label
            rows.append({"prompt": f"{texts[i * n + j]} which option? answer:", "choices": [" A", " B"],
                         "label": label, "spurious_label": spurious})
        write_jsonl(Path(root) / f"{split}.jsonl", rows)
    return Path(root)


def write_em(root: Path, n: int = 6, n_questions: int = 2, seed: int = 0) -> Path:
    """``insecure.jsonl`` chat records and ``first_plot_questions.yaml`` (Betley et al.'s layout)."""
    texts = sentences(n + n_questions, seed)
    write_jsonl(Path(root) / "insecure.jsonl",
                [{"messages": [{"role": "user", "content": f"write code: {t}"},
                               {"role": "assistant", "content": f"def f(): return '{t}'"}]} for t in texts[:n]])
    questions = [{"id": f"q{i}", "type": "free_form_judge_0_100", "paraphrases": [texts[n + i]],
                  "samples_per_paraphrase": 2} for i in range(n_questions)]
    (Path(root) / "first_plot_questions.yaml").write_text(yaml.safe_dump(questions))
    return Path(root)
