"""The paper profile's concept directions, and the uninterpreted ``top`` baseline.

Two sources (``paper.directions``), each with the interpretation done by a human outside the
pipeline and passed in as indices:

- ``sae``: the decoder rows of the latents in ``paper.latents`` (``sae.py``).
- ``pca``: the paper's other tool. The base model and the standard-fine-tuned model (the
  ``pretune`` run of the first seed) read the same token sequences; at each hooked decoder
  layer the per-token differences ft - base on the completion (assistant) tokens are centred
  and their top ``paper.n_pcs`` principal components computed; ``paper.pcs`` picks the
  interpreted ones. ``displays.json`` lists, for every PC, the tokens whose difference projects
  most onto it, for the human who picks.

The ``top`` variant ablates as many directions per layer as the interpreted set, chosen
without interpretation: the first PCs, or the SAE latents whose mean activation changed most
between base and fine-tuned model on the same tokens.
"""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch

from components.caft.ablation import decoder_outputs
from components.caft.directions import pca

N_DISPLAY = 8   # tokens shown per PC


def direction_rows(cfg, sft_rows: list[dict]) -> list[dict]:
    """The prompt/completion rows whose completion tokens are read: ``paper.pca_data`` chats
    (the paper used the model's answers to LMSYS prompts) or the SFT training rows."""
    from components.caft.paper import split_chat
    from components.common.readers import read_jsonl

    p = cfg.paper
    if p.pca_data:
        rows = [split_chat(r["messages"]) for r in read_jsonl(p.pca_data, {"messages": list}, limit=p.pca_examples)]
    else:
        rows = sft_rows[:p.pca_examples]
    return rows


def completion_ids(tok, row: dict, max_length: int) -> tuple[list[int], int]:
    """Token ids of prompt + completion and where the completion starts. The two parts are
    tokenised apart (a chat's rendered by its template), so the prompt's tokens are exactly a
    prefix; tokenising the joined text can merge tokens across the boundary."""
    if isinstance(row["prompt"], str):
        prompt = tok(row["prompt"])["input_ids"]
        rest = row["completion"]
    else:
        head = tok.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        full = tok.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
        prompt = tok(head, add_special_tokens=False)["input_ids"]
        rest = full[len(head):] if full.startswith(head) else "".join(m["content"] for m in row["completion"])
    ids = prompt + tok(rest, add_special_tokens=False)["input_ids"]
    return ids[:max_length], min(len(prompt), max_length)


def completion_residuals(model, ids: list[int], start: int, layers: list[int]) -> dict[int, torch.Tensor]:
    """Residual stream after each decoder layer at the completion positions, float32 on CPU."""
    seen = decoder_outputs(model, torch.tensor([ids]), layers)
    return {l: seen[l][0, start:].float().cpu() for l in layers}


def load_fine_tuned(p, run_dir: Path):
    """(fine-tuned model, a context that turns it into the base model, base model or None).
    A LoRA run's adapter shares the base weights (``disable_adapter``); a full fine-tune
    (``paper.lora_rank=0``) saved a whole model, so the base is loaded beside it."""
    from components.common.hf_models import load_model
    from components.common.peft_lora import load_adapter

    saved = run_dir / "adapter"
    base = load_model(p.model_path, "causal_lm", device=p.device)
    if (saved / "adapter_config.json").is_file():
        ft = load_adapter(base, saved).eval()
        return ft, ft.disable_adapter, None
    return load_model(saved, "causal_lm", device=p.device), nullcontext, base


def activation_differences(cfg, rows: list[dict], run_dir: Path, layers: list[int]):
    """Per layer: base and fine-tuned residuals on the completion tokens of ``rows`` (the same
    ids through both), and each token's (row, id) for the displays."""
    from components.common.hf_models import load_tokenizer

    p = cfg.paper
    tok = load_tokenizer(p.model_path)
    ft, as_base, base = load_fine_tuned(p, run_dir)
    acts = {"base": {l: [] for l in layers}, "ft": {l: [] for l in layers}}
    where = []
    for i, row in enumerate(rows):
        ids, start = completion_ids(tok, row, p.max_length)
        if start >= len(ids):
            continue
        for l, h in completion_residuals(ft, ids, start, layers).items():
            acts["ft"][l].append(h)
        with as_base():
            for l, h in completion_residuals(base or ft, ids, start, layers).items():
                acts["base"][l].append(h)
        where += [(i, tok.decode([t])) for t in ids[start:]]
    if not where:
        raise ValueError("no completion tokens to compare (every row was cut at paper.max_length)")
    return ({k: {l: torch.cat(v[l]) for l in layers} for k, v in acts.items()}, where)


def pc_displays(diff: torch.Tensor, pcs: torch.Tensor, where: list[tuple[int, str]]) -> list[list[dict]]:
    """For each PC the tokens whose difference vector projects most onto it (either sign)."""
    proj = (diff - diff.mean(0)) @ pcs.T
    out = []
    for j in range(pcs.shape[0]):
        top = torch.argsort(proj[:, j].abs(), descending=True)[:N_DISPLAY].tolist()
        out.append([{"row": where[t][0], "token": where[t][1], "projection": float(proj[t, j])} for t in top])
    return out


def sae_activations(path: str, x: torch.Tensor) -> torch.Tensor:
    """Latent activations [n, d_sae] of residuals ``x`` under one SAE file: Gemma Scope's
    JumpReLU (x W_enc + b_enc, kept above ``threshold``) or a dictionary_learning batch-top-k
    ``ae.pt`` (ReLU(encoder(x - b_dec)), kept above its inference ``threshold`` when saved)."""
    from components.common.readers import read_npz

    path = Path(path).expanduser()
    if path.suffix == ".npz":
        f = read_npz(str(path), {"W_enc": 2, "b_enc": 1, "threshold": 1})
        pre = x @ torch.from_numpy(np.asarray(f["W_enc"], np.float32)) + torch.from_numpy(np.asarray(f["b_enc"], np.float32))
        return pre * (pre > torch.from_numpy(np.asarray(f["threshold"], np.float32)))
    state = torch.load(path, map_location="cpu", weights_only=True)
    w = state["encoder.weight"].float()
    b = state.get("encoder.bias", torch.zeros(w.shape[0])).float()
    post = torch.relu((x - state.get("b_dec", torch.zeros(w.shape[1])).float()) @ w.T + b)
    threshold = state.get("threshold")
    return post * (post > threshold.float()) if threshold is not None and threshold.ndim == 0 else post


def top_latents(path: str, base: torch.Tensor, ft: torch.Tensor, k: int) -> list[int]:
    """The k latents whose mean activation changed most (either sign) from base to fine-tuned."""
    change = (sae_activations(path, ft).mean(0) - sae_activations(path, base).mean(0)).abs()
    return torch.argsort(change, descending=True)[:k].tolist()


def chosen(p) -> dict[int, list[int]]:
    return dict(p.pcs) if p.directions == "pca" else dict(p.latents)


def needs_activations(cfg) -> bool:
    return cfg.paper.directions == "pca" or "top" in cfg.caft.variants


def paper_subspace(cfg, sft_rows: list[dict], run_dir: Path | None):
    """(interpreted directions {layer: [k, d]}, top directions (or {}), metrics, records)."""
    from components.caft.sae import decoder_rows, sae_directions
    from components.common.hf_models import read_config

    p = cfg.paper
    config = read_config(p.model_path)
    d_model = config.get("hidden_size") or config["text_config"]["hidden_size"]
    picks = chosen(p)
    layers = sorted(picks)
    records = {str(l): {"source": p.directions, "ids": picks[l]} for l in layers}
    acts = where = None
    if needs_activations(cfg):
        acts, where = activation_differences(cfg, direction_rows(cfg, sft_rows), run_dir, layers)
    dirs, top = {}, {}
    if p.directions == "sae":
        dirs = sae_directions(dict(p.sae_files), picks, d_model)
        for l in layers:
            records[str(l)]["file"] = p.sae_files[l]
            if "top" in cfg.caft.variants:
                ids = top_latents(p.sae_files[l], acts["base"][l], acts["ft"][l], len(picks[l]))
                top[l] = decoder_rows(p.sae_files[l])[torch.tensor(ids, dtype=torch.long)]
                records[str(l)]["top_ids"] = ids
    else:
        for l in layers:
            diff = acts["ft"][l] - acts["base"][l]
            comp = pca(diff, p.n_pcs)
            if len(comp["pcs"]) < p.n_pcs:
                raise ValueError(f"layer {l}: {len(diff)} tokens compared give {len(comp['pcs'])} PCs, fewer than "
                                 f"paper.n_pcs={p.n_pcs} (raise paper.pca_examples)")
            dirs[l] = comp["pcs"][torch.tensor(picks[l], dtype=torch.long)]
            top[l] = comp["pcs"][:len(picks[l])]
            records[str(l)].update(var_ratio=comp["var_ratio"].tolist(),
                                   displays=pc_displays(diff, comp["pcs"], where))
    metrics = {"k_total": sum(len(v) for v in picks.values()), **{f"k/layer{l}": len(picks[l]) for l in layers}}
    if where is not None:
        metrics["n_tokens_compared"] = len(where)
    return dirs, top, metrics, records
