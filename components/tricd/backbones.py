"""The frozen video LLM behind one interface, so the decoder, the router and the evaluation are
the same code for the toy backbone (small, smoke) and a Qwen2-VL-family model (paper).

A backbone answers a batch of (video, question) rows with the logits of the five answer tokens
(yes, no, A, B, C) at the answer position, optionally with the final hidden states of the whole
input and its padding mask (the router's input), and optionally with every visual token's
feature multiplied by a weight right at the vision tower's output (the positive pathway):

    enc = backbone.encode(qa)                         # once per split
    q, hidden, pad = backbone.forward(videos, enc[rows], weight=None, hidden=True)

``videos`` are float (B, T, H, W, 3) on the 0..255 scale; ``weight`` is (B, T' * P) over the
visual tokens in the vision tower's order (T' = T / tpatch token frames, P tokens a frame,
row-major), which is also the layout ``saliency.pool_to_tokens`` produces.
"""
from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ANSWER_TOKENS = ("yes", "no", "A", "B", "C")
MAX_TEXT = 40
# OpenAI CLIP normalisation, Qwen2-VL's processor default when a folder has no processor config
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


class ToyBackbone:
    """The toy video LLM (``model.ToyVLLM``): word tokens of the question, visual tokens, ``<ans>``."""

    kind = "toy"
    batch = 256

    def __init__(self, model):
        from components.tricd.model import build_vocab

        self.model = model
        self.compound = getattr(model, "compound", False)   # v10: compound colour-shape ids
        self.index = {w: i for i, w in enumerate(build_vocab(self.compound))}
        self.answer_ids = torch.tensor([self.index[w] for w in ANSWER_TOKENS])
        self.token_px, self.tpatch = model.token_px, model.tpatch
        self.d_model = model.tok_emb.embedding_dim

    def encode(self, qa) -> torch.Tensor:
        from components.tricd.model import encode

        return torch.tensor([encode(q, self.index, MAX_TEXT, self.compound) for q in qa.question], dtype=torch.long)

    def forward(self, videos, enc, weight=None, hidden: bool = False):
        # the full left-padded width on every pass: the toy's attention has no padding mask, so
        # trimming the pad columns a batch shares changed the logits with the batch (and made
        # the hidden-state pass q_o differ from the trimmed q_n / q_p passes of the same row)
        logits, h = self.model(videos, enc, weight)
        q = logits[:, self.answer_ids]
        if not hidden:
            return q, None, None
        n = len(enc)   # hidden layout: [question words][visual tokens][<ans>] (video_first: visual first)
        words, visual = enc[:, :-1] == 0, torch.zeros(n, self.model.n_visual, dtype=torch.bool)
        parts = [visual, words] if self.model.video_first else [words, visual]
        pad = torch.cat([*parts, torch.zeros(n, 1, dtype=torch.bool)], dim=1)
        return q, h, pad

    def describe(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Descriptions read through the (frozen) word embeddings: (n, L, d), (n, L) True = pad."""
        from components.tricd.model import encode

        from components.tricd.model import tokenize

        length = max(len(tokenize(t, self.compound)) for t in texts)
        ids = torch.tensor([encode(t, self.index, length + 1, self.compound)[:-1] for t in texts])
        with torch.no_grad():
            return self.model.tok_emb(ids), ids == 0


@dataclass
class Prompts:
    """Rows of a split as token ids around one video slot: ``prefix + <video> + suffix``."""
    prefix: list[list[int]]
    suffix: list[list[int]]
    max_len: int                         # longest prefix + suffix of the split (fixed padding)

    def __len__(self) -> int:
        return len(self.prefix)

    def __getitem__(self, rows) -> "Prompts":
        if isinstance(rows, slice):
            return Prompts(self.prefix[rows], self.suffix[rows], self.max_len)
        rows = np.asarray(rows).reshape(-1)
        return Prompts([self.prefix[i] for i in rows], [self.suffix[i] for i in rows], self.max_len)


# The official prompts (vcd/utils.py ``_build_vqa_prompt``; the release's questions are in
# Chinese): "You are a professional AI video QA assistant. Answer the question from the video.
# Your answer may only be "yes" or "no" (resp. one of the given options A, B, C)."
PROMPT_YN = ("你是一个专业的AI视频问答助手。请根据视频内容，回答以下问题。\n\n"
             "要求：你的回答只能是\"yes\"或\"no\"，不要包含其他内容\n\n问题：{question}\n")
PROMPT_MC = ("你是一个专业的AI视频问答助手。请根据视频内容，回答以下多项选择题。\n\n"
             "要求：你的回答只能从给定的选项中选择（A, B, C），不要包含其他内容\n\n"
             "问题：{question}\n选项：\n{options}\n")
VIDEO_SLOT = "\x00VIDEO\x00"
CHATML = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{content}"
          "<|im_end|>\n<|im_start|>assistant\n")


class QwenVLBackbone:
    """A Qwen2-VL / Qwen2.5-VL checkpoint (transformers) from a local folder.

    Frames become the model's video input exactly as ``Qwen2VLVideoProcessor`` lays them out
    (rescale, normalise, ``temporal_patch_size`` x ``patch_size`` x ``patch_size`` tubelets
    grouped by ``spatial_merge_size``; written out here because that processor needs
    torchvision); the prompt is the official one inside the tokenizer's chat template with one
    ``<|vision_start|><|video_pad|>...<|vision_end|>`` slot; rows are left-padded so the answer
    logits sit at the last position; the multimodal RoPE gets ``mm_token_type_ids`` (2 = video),
    which transformers >= 5 requires."""

    kind = "hf"

    def __init__(self, folder: str | Path, device: str = "auto", dtype: str = "auto", batch: int = 4,
                 seconds_per_frame: float = 0.5):
        from components.common.hf_models import load_model, load_tokenizer

        self.folder = Path(folder).expanduser()
        self.model = load_model(self.folder, "vlm", device=device, dtype=dtype)
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.tokenizer = load_tokenizer(self.folder)
        cfg = self.model.config
        vis = cfg.vision_config
        self.model_type = cfg.model_type
        self.patch, self.merge, self.tpatch = vis.patch_size, vis.spatial_merge_size, vis.temporal_patch_size
        self.token_px = self.patch * self.merge
        self.video_id, self.start_id, self.end_id = cfg.video_token_id, cfg.vision_start_token_id, cfg.vision_end_token_id
        text = getattr(cfg, "text_config", cfg)
        self.d_model = text.hidden_size
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self.mean, self.std = self._normalisation()
        self.answer_ids = torch.tensor(self._answer_ids())
        self.batch = batch
        self.seconds_per_frame = seconds_per_frame

    # -- inputs ------------------------------------------------------------------------------
    def _normalisation(self):
        for name in ("video_preprocessor_config.json", "preprocessor_config.json"):
            path = self.folder / name
            if path.is_file():
                conf = json.loads(path.read_text())
                if "image_mean" in conf and "image_std" in conf:
                    return tuple(conf["image_mean"]), tuple(conf["image_std"])
        return CLIP_MEAN, CLIP_STD

    def _answer_ids(self) -> list[int]:
        """The first token of each answer word (Qwen's vocabulary has each as one token)."""
        ids = [self.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in ANSWER_TOKENS]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{self.folder}: the answer words {ANSWER_TOKENS} share first tokens {ids}")
        return ids

    def prompt_text(self, question: str, options) -> str:
        content = (PROMPT_YN.format(question=question) if not len(options) else
                   PROMPT_MC.format(question=question, options="\n".join(options)))
        messages = [{"role": "user", "content": VIDEO_SLOT + content}]
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return CHATML.format(content=VIDEO_SLOT + content)

    def encode(self, qa) -> Prompts:
        prefix, suffix = [], []
        for question, options in zip(qa.question, qa.options):
            before, after = self.prompt_text(question, list(options)).split(VIDEO_SLOT)
            prefix.append(self.tokenizer(before, add_special_tokens=False)["input_ids"])
            suffix.append(self.tokenizer(after, add_special_tokens=False)["input_ids"])
        return Prompts(prefix, suffix, max((len(a) + len(b) for a, b in zip(prefix, suffix)), default=0))

    def patchify(self, videos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T, H, W, 3) on 0..255 -> flattened patches (B * T' * gh * gw, 3 * tp * p * p) and
        the grid (T', gh, gw), in ``Qwen2VLVideoProcessor.patchify``'s order."""
        b, t, h, w, _ = videos.shape
        p, m, tp = self.patch, self.merge, self.tpatch
        if h % (p * m) or w % (p * m):
            raise ValueError(f"frames of {h}x{w} px: the size must be a multiple of patch_size * "
                             f"spatial_merge_size = {p * m} (set paper.frame_size)")
        x = (videos.float() / 255.0 - torch.tensor(self.mean)) / torch.tensor(self.std)
        x = x.permute(0, 1, 4, 2, 3)                                    # (B, T, C, H, W)
        if t % tp:                                                       # repeat the last frame
            x = torch.cat([x, x[:, -1:].expand(-1, tp - t % tp, -1, -1, -1)], dim=1)
            t = x.shape[1]
        gt, gh, gw = t // tp, h // p, w // p
        x = x.reshape(b, gt, tp, 3, gh // m, m, p, gw // m, m, p).permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)
        return x.reshape(b * gt * gh * gw, 3 * tp * p * p), torch.tensor([gt, gh, gw])

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @contextmanager
    def _reweighted(self, weight: torch.Tensor | None):
        """Multiply every merged visual token by its weight at the vision tower's output (the
        official positive pathway: a forward hook on ``model.visual``)."""
        if weight is None:
            yield
            return

        def hook(module, args, output):
            feats = output.pooler_output
            output.pooler_output = feats * weight.reshape(-1, 1).to(feats.device, feats.dtype)
            return output

        handle = self.model.model.visual.register_forward_hook(hook)
        try:
            yield
        finally:
            handle.remove()

    @torch.no_grad()
    def forward(self, videos, enc: Prompts, weight=None, hidden: bool = False):
        dev, b = self.device, len(enc)
        pixels, grid = self.patchify(videos)
        n_video = int(grid.prod()) // self.merge ** 2
        rows = [a + [self.start_id] + [self.video_id] * n_video + [self.end_id] + c
                for a, c in zip(enc.prefix, enc.suffix)]
        length = enc.max_len + n_video + 2 if hidden else max(len(r) for r in rows)
        ids = torch.full((b, length), self.pad_id, dtype=torch.long)
        attn = torch.zeros(b, length, dtype=torch.long)
        for i, r in enumerate(rows):                                     # left padding
            ids[i, length - len(r):] = torch.as_tensor(r)
            attn[i, length - len(r):] = 1
        types = torch.where((ids == self.video_id) & (attn == 1), 2, 0)
        dtype = next(self.model.parameters()).dtype
        kwargs = {}
        if self.model_type == "qwen2_5_vl":    # seconds per temporal patch (Qwen2.5-VL's time RoPE)
            kwargs["second_per_grid_ts"] = torch.full((b,), self.tpatch * self.seconds_per_frame, device=dev)
        with self._reweighted(weight):
            out = self.model(input_ids=ids.to(dev), attention_mask=attn.to(dev), mm_token_type_ids=types.to(dev),
                             pixel_values_videos=pixels.to(dev, dtype), video_grid_thw=grid[None].repeat(b, 1).to(dev),
                             output_hidden_states=hidden, use_cache=False, **kwargs)
        q = out.logits[:, -1].float().cpu()[:, self.answer_ids]
        if not hidden:
            return q, None, None
        return q, out.hidden_states[-1].cpu(), attn == 0

    @torch.no_grad()
    def describe(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Tool descriptions encoded by the backbone's language model (official
        ``tools_embed.py``: last hidden states, padding dropped): (n, L, d), (n, L) True = pad."""
        enc = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        length = max(len(e) for e in enc)
        ids = torch.full((len(enc), length), self.pad_id, dtype=torch.long)
        attn = torch.zeros(len(enc), length, dtype=torch.long)
        for i, e in enumerate(enc):                                      # right padding
            ids[i, :len(e)] = torch.as_tensor(e)
            attn[i, :len(e)] = 1
        out = self.model(input_ids=ids.to(self.device), attention_mask=attn.to(self.device),
                         output_hidden_states=True, use_cache=False)
        return out.hidden_states[-1].float().cpu(), attn == 0


def open_backbone(cfg, backbone_dir):
    """The frozen backbone the stages share: the paper's checkpoint (paper profile) or the toy
    trained by ``train_backbone`` (``backbone_dir`` / backbone.pt)."""
    if cfg.paper.enabled:
        p = cfg.paper
        return QwenVLBackbone(p.model_path, device=p.device, dtype=p.dtype, batch=p.batch_size,
                              seconds_per_frame=p.seconds_per_frame)
    from components.tricd.backbone import load_backbone

    return ToyBackbone(load_backbone(Path(backbone_dir) / "backbone.pt", cfg.bench, cfg.backbone))
