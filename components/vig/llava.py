"""The paper profile (``data.source = "llava"``): LLaVA-1.5 from a local folder, the LLaVA-665K
instruction JSON and its images from a user root, benchmark files in their published layouts.

Each small-profile stage dispatches here when the source is ``llava``; the science is shared with
the small path: ``model.token_nll`` / ``weighted_lm_loss`` (image tokens after ``<bos>``, loss on
weighted text positions = LLaVA's labels with -100 elsewhere), ``data.blur`` (the no-vision
control), ``model.sample_vig`` and ``score.select_tokens`` (top-p % samples, tau_p token mask),
``train.random_matched_weights`` and ``components.common.train.fit``. What differs: the
conversations come from disk and go through the checkpoint's tokenizer, images are loaded per
batch (too many to keep in memory), the arms are LoRA adapters (peft) on the checkpoint, and the
benchmarks are the paper's that can be scored offline (components.vig.benchmarks).

Images are padded to a square with the image processor's mean colour and then resized, as
LLaVA-1.5 does (``image_aspect_ratio = pad``); prompts follow LLaVA-1.5's ``vicuna_v1`` template
with the image right after the system prompt and ``USER:``.

Pixels are kept on the small path's 0..255 scale, ``(x_norm + 1) * 127.5`` with ``x_norm`` the CLIP-
normalised image, so ``model.pixel_values`` maps them back exactly to what the CLIP tower expects;
the Gaussian blur is linear and reflect-padded, so blurring that scale equals blurring the image.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from components.common.devices import resolve_device, resolve_dtype
from components.common.hf_models import load_model, load_tokenizer
from components.common.io import load_torch, save_torch, write_json_atomic, write_table, read_table
from components.common.peft_lora import attach_lora, load_adapter, save_adapter
from components.common.seeds import seed_everything
from components.common.train import fit
from components.vig.data import blur
from components.vig.model import sample_vig, token_nll, weighted_lm_loss

# CLIP ViT-L/14-336's normalisation (LLaVA-1.5's image processor), used when the folder has no
# preprocessor_config.json
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
DECODER_ATTENTION_REGEX = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj)"
USER, ASSISTANT = "USER:", "ASSISTANT:"      # LLaVA-1.5's conversation template (vicuna_v1)
SYSTEM = ("A chat between a curious human and an artificial intelligence assistant. "
          "The assistant gives helpful, detailed, and polite answers to the human's questions.")


def is_paper(cfg) -> bool:
    return cfg.data.source == "llava"


# ---------------------------------------------------------------- model, tokenizer, images
def load_llava(cfg):
    device = resolve_device(cfg.paper.device)
    model = load_model(cfg.paper.model_path, "vlm", device=str(device),
                       dtype=str(resolve_dtype(device, cfg.paper.dtype)).removeprefix("torch."))
    return model, device


def image_norm(model_path: str) -> tuple[tuple, tuple]:
    path = Path(model_path).expanduser() / "preprocessor_config.json"
    if path.is_file():
        conf = json.loads(path.read_text())
        return tuple(conf.get("image_mean", CLIP_MEAN)), tuple(conf.get("image_std", CLIP_STD))
    return CLIP_MEAN, CLIP_STD


def expand_to_square(img, fill: tuple[int, ...]):
    """LLaVA-1.5's ``expand2square``: paste the image centred on a square of colour ``fill``."""
    from PIL import Image

    width, height = img.size
    if width == height:
        return img
    side = max(width, height)
    square = Image.new(img.mode, (side, side), fill)
    square.paste(img, ((side - width) // 2, (side - height) // 2))
    return square


def open_image(source):
    """A path, or encoded bytes (MMBench's base64 column), as an RGB PIL image."""
    import io

    from PIL import Image

    return Image.open(io.BytesIO(source) if isinstance(source, bytes) else source).convert("RGB")


def load_images(sources: list, size: int, mean, std, pad: bool = True) -> torch.Tensor:
    """(B, 3, size, size) float on the 0..255 scale (see module docstring); '' = a text-only
    sample, given a flat grey image as on the small path. ``pad``: square with the mean colour
    first (LLaVA-1.5), else a plain resize."""
    from PIL import Image

    fill = tuple(int(255 * m) for m in mean)
    out = []
    for source in sources:
        if isinstance(source, bytes) or source:
            img = open_image(source)
            img = (expand_to_square(img, fill) if pad else img).resize((size, size), Image.BICUBIC)
            arr = np.asarray(img, dtype=np.float32) / 255.0
        else:
            arr = np.full((size, size, 3), 0.5, dtype=np.float32)
        norm = (arr - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
        out.append((norm.transpose(2, 0, 1) + 1.0) * 127.5)
    return torch.from_numpy(np.stack(out))


def pads_to_square(cfg) -> bool:
    if cfg.paper.image_aspect_ratio not in ("pad", "resize"):
        raise ValueError(f"paper.image_aspect_ratio must be pad or resize, got {cfg.paper.image_aspect_ratio!r}")
    return cfg.paper.image_aspect_ratio == "pad"


def image_size(model) -> int:
    return model.config.vision_config.image_size


# ---------------------------------------------------------------- prompts, prepare_data
def prompt_prefix(tok) -> list[int]:
    """``<bos>`` + LLaVA-1.5's system prompt + ``USER:``; the image tokens follow it, so its
    length is the ``image_at`` of ``model.text_logits``."""
    return [tok.bos_token_id] + tok(f"{SYSTEM} {USER}", add_special_tokens=False).input_ids


def encode_conversation(tok, turns: list[dict], max_len: int) -> tuple[list[int], list[bool]]:
    """<bos> SYSTEM USER: [image] q ASSISTANT: a</s>USER: q ASSISTANT: a</s> ...; ``supervised``
    marks the answer tokens and their </s> (LLaVA's labels). The <image> tag leaves the text: the
    image tokens go after the prefix, where LLaVA-1.5 moves the tag."""
    ids = prompt_prefix(tok)
    if max_len <= len(ids):
        raise ValueError(f"paper.max_len = {max_len} leaves no room after the {len(ids)}-token system prompt")
    supervised = [False] * len(ids)
    for k, (human, gpt) in enumerate(zip(turns[0::2], turns[1::2])):
        question = human["value"].replace("<image>", "").strip()
        head = f"\n{question} {ASSISTANT}" if k == 0 else f"{USER} {question} {ASSISTANT}"
        prompt = tok(head, add_special_tokens=False).input_ids
        answer = tok(f" {gpt['value'].strip()}", add_special_tokens=False).input_ids + [tok.eos_token_id]
        ids += prompt + answer
        supervised += [False] * len(prompt) + [True] * len(answer)
    return ids[:max_len], supervised[:max_len]


def question_ids(tok, question: str) -> list[int]:
    """An evaluation prompt: the first turn up to ``ASSISTANT:``, the answer to be predicted."""
    return prompt_prefix(tok) + tok(f"\n{question} {ASSISTANT}", add_special_tokens=False).input_ids


def prepare_data_stage(cfg, ctx) -> None:
    rows = json.loads(Path(cfg.data.llava_json).expanduser().read_text())
    if cfg.paper.max_samples:
        rows = rows[:cfg.paper.max_samples]
    tok = load_tokenizer(cfg.paper.model_path)
    root = Path(cfg.data.image_root).expanduser()
    encoded = [encode_conversation(tok, r["conversations"], cfg.paper.max_len) for r in rows]
    length = max(len(ids) for ids, _ in encoded) + 1          # +1: text_logits drops the last slot
    tokens = torch.full((len(rows), length), tok.pad_token_id, dtype=torch.long)
    supervised = torch.zeros((len(rows), length), dtype=torch.bool)
    for i, (ids, sup) in enumerate(encoded):
        tokens[i, :len(ids)], supervised[i, :len(sup)] = torch.tensor(ids), torch.tensor(sup)
    images = [str(root / r["image"]) if r.get("image") else "" for r in rows]
    missing = [p for p in images if p and not Path(p).is_file()]
    if missing:
        raise FileNotFoundError(f"data.image_root: {len(missing)} images of data.llava_json are missing "
                                f"under {root}, e.g. {missing[0]}")
    save_torch(ctx.out_dir / "train.pt", {"tokens": tokens, "supervised": supervised,
                                          "image_at": len(prompt_prefix(tok))})
    write_table(ctx.out_dir / "train_samples.parquet",
                {"id": [str(r.get("id", i)) for i, r in enumerate(rows)], "image": images,
                 "kind": ["multimodal" if p else "text" for p in images]})
    ctx.write_metrics({"n_train": len(rows), "n_multimodal": sum(bool(p) for p in images),
                       "seq_len": length, "answer_tokens": int(supervised.sum())})


def image_paths(data_dir) -> list[str]:
    return read_table(data_dir / "train_samples.parquet").column("image").to_pylist()


# ---------------------------------------------------------------- align / reference
def checkpoint_stage(cfg, ctx, role: str) -> None:
    """LLaVA-1.5 (paper.model_path) is already aligned (stage 1) and is the VIG scorer: record its
    role instead of training a toy (this stage does not declare ``paper``, so it names no path)."""
    write_json_atomic(ctx.out_dir / "checkpoint.json", {"role": role, "model": "paper.model_path"})
    ctx.write_metrics({"trained_steps": 0})


# ---------------------------------------------------------------- score_vig
@torch.no_grad()
def score_vig_stage(cfg, ctx) -> None:
    data_dir = ctx.inputs["prepare_data"]
    model, device = load_llava(cfg)
    split, paths = load_torch(data_dir / "train.pt"), image_paths(data_dir)
    mean, std = image_norm(cfg.paper.model_path)
    l_img, l_blur = [], []
    for s in range(0, len(paths), cfg.paper.batch_size):
        images = load_images(paths[s:s + cfg.paper.batch_size], image_size(model), mean, std, pads_to_square(cfg))
        tokens = split["tokens"][s:s + cfg.paper.batch_size].to(device)
        for view, out in ((images, l_img), (blur(images, cfg.vig.blur_sigma_frac), l_blur)):
            out.append(token_nll(model, view.to(device), tokens, split["image_at"]).float().cpu())
    l_img, l_blur = torch.cat(l_img), torch.cat(l_blur)
    d = l_blur - l_img
    answer = split["supervised"][:, 1:].float()
    vig = sample_vig(d, answer).numpy()
    save_torch(ctx.out_dir / "vig.pt", {"d": d, "l_img": l_img, "l_blur": l_blur, "sample_vig": vig})
    kinds = np.array(["multimodal" if p else "text" for p in paths])
    write_table(ctx.out_dir / "vig_samples.parquet",
                {"id": list(range(len(vig))), "kind": kinds.tolist(), "vig": vig.tolist()})
    mm = kinds != "text"
    mask = answer.bool()
    summary = {"vig_mean_multimodal": float(vig[mm].mean()) if mm.any() else float("nan"),
               "vig_mean_text": float(vig[~mm].mean()) if (~mm).any() else float("nan"),
               "d_answer_mean": float(d[mask].mean()), "d_answer_positive_frac": float((d[mask] > 0).float().mean())}
    write_json_atomic(ctx.out_dir / "vig_summary.json", summary)
    ctx.write_metrics(summary)


# ---------------------------------------------------------------- train_arm
def batch_stream(split, paths, weights, batch_size: int, seed: int, size: int, norm, pad: bool, device):
    pool = torch.nonzero(weights.sum(1) > 0).squeeze(1)
    gen = torch.Generator().manual_seed(seed)
    while True:
        idx = pool[torch.randint(len(pool), (batch_size,), generator=gen)]
        images = load_images([paths[i] for i in idx.tolist()], size, *norm, pad)
        yield images.to(device), split["tokens"][idx].to(device), weights[idx].to(device)


def train_arm_stage(cfg, ctx, weights: torch.Tensor) -> dict:
    """Label-masked LoRA SFT of the checkpoint on the arm's weighted tokens; saves the adapter."""
    data_dir = ctx.inputs["prepare_data"]
    seed = ctx.item["seed"]
    seed_everything(seed)
    model, device = load_llava(cfg)
    model = attach_lora(model, DECODER_ATTENTION_REGEX, rank=cfg.paper.lora_rank, alpha=cfg.paper.lora_alpha)
    split, paths = load_torch(data_dir / "train.pt"), image_paths(data_dir)
    stream = batch_stream(split, paths, weights, cfg.train.batch_size, seed, image_size(model),
                          image_norm(cfg.paper.model_path), pads_to_square(cfg), device)
    image_at = split["image_at"]
    records = fit(model, stream, lambda m, b: weighted_lm_loss(m, *b, image_at=image_at), steps=cfg.train.steps, lr=cfg.train.lr,
                  warmup=max(1, cfg.train.steps // 20), ctx=ctx, prefix="train",
                  log_every=max(1, cfg.train.steps // 20))
    save_adapter(model, ctx.out_dir / "adapter")
    return {"final_loss": records[-1]["train/loss"]}


# ---------------------------------------------------------------- evaluate
def evaluate_stage(cfg, ctx) -> None:
    """Every arm (LoRA adapter on the checkpoint) on each benchmark of ``paper.benchmarks``."""
    from components.common.io import read_json
    from components.vig import benchmarks       # it imports this module

    suites = benchmarks.load_all(cfg)
    tok = load_tokenizer(cfg.paper.model_path)
    table = []
    for variant in cfg.train.variants:
        for seed in cfg.seeds:
            arm_dir = ctx.inputs["train_arm"][f"{variant}-{seed}"]
            base, device = load_llava(cfg)
            runner = benchmarks.Runner(load_adapter(base, arm_dir / "adapter"), tok, device, cfg)
            row = {"variant": variant, "seed": seed,
                   "supervised_tokens": read_json(arm_dir / "counts.json")["supervised_tokens"]}
            for suite in suites:
                scores, answers = runner.run(suite)
                row.update(scores)
                write_table(ctx.out_dir / f"answers-{suite.name}-{variant}-{seed}.parquet", answers)
            table.append(row)
    write_table(ctx.out_dir / "benchmarks.parquet", {k: [r[k] for r in table] for k in table[0]})
    metrics = arm_means(cfg, table)
    metrics.update({f"n_{s.name}": len(s.questions) for s in suites})
    write_json_atomic(ctx.out_dir / "claims.json", {"summary": metrics, "benchmarks": [s.name for s in suites]})
    ctx.write_metrics(metrics)


def arm_means(cfg, table: list[dict]) -> dict:
    """Per-arm means over seeds, and VIG minus each baseline on every image-view score."""
    metrics = {}
    scores = [k for k in table[0] if k not in ("variant", "seed")]
    for variant in cfg.train.variants:
        mine = [r for r in table if r["variant"] == variant]
        metrics.update({f"{variant}_{k}": float(np.mean([r[k] for r in mine])) for k in scores})
    for base in ("vanilla", "random"):
        if {"vig", base} <= set(cfg.train.variants):
            for key in [k for k in scores if k.endswith("_image")]:
                metrics[f"vig_minus_{base}_{key}"] = metrics[f"vig_{key}"] - metrics[f"{base}_{key}"]
            metrics[f"token_ratio_vig_over_{base}"] = (metrics["vig_supervised_tokens"]
                                                       / metrics[f"{base}_supervised_tokens"])
    return metrics
