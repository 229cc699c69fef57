"""The toy video LLM: the question's word tokens, then patch tokens of every frame, then the
answer slot, through a causal pre-norm transformer (blocks from components.common.transformer); the answer is the
next token predicted at the final ``<ans>`` position, as a VLLM decodes a one-token answer.

``visual_weight`` (B, T*P) multiplies the visual token features right after the patch
projection, i.e. the output of the "vision tower", exactly where the official positive pathway
hooks in.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from components.common.transformer import MLP, Block
from components.tricd import benchmark as B
from components.tricd import video as V
from components.tricd.tools import TOOL_TEXT

PAD, ANS = "<pad>", "<ans>"
MAX_CAPTION = 64
CAPTION_PROMPT = "describe the video"
ANSWER_WORDS = {"yn": ("yes", "no"), "mc": ("A", "B", "C")}


def build_vocab() -> list[str]:
    words: set[str] = set()
    texts = ["is it true that ? and which is true ? there is a the scene is camera before",
             B.NONE_OPTION, B.ALL_OPTION, " ".join(B.RELATIONS), " ".join(B.MOTION_WORDS.values()),
             " ".join(B.CAMERA_WORDS.values()), " ".join(V.COLORS), " ".join(V.SHAPES),
             " ".join(V.SCENES), "appears disappears yes no A B C", CAPTION_PROMPT, ".", *TOOL_TEXT.values()]
    for text in texts:
        words.update(text.split())
    return [PAD, ANS] + sorted(words)


def encode(text: str, vocab_index: dict[str, int], max_text: int) -> list[int]:
    """Word ids + <ans>, left-padded to max_text (the answer slot is always the last one)."""
    ids = [vocab_index[w] for w in text.split()] + [vocab_index[ANS]]
    if len(ids) > max_text:
        raise ValueError(f"question of {len(ids)} tokens exceeds max_text={max_text}")
    return [vocab_index[PAD]] * (max_text - len(ids)) + ids


class ToyVLLM(nn.Module):
    def __init__(self, vocab_size: int, frames: int, size: int, patch: int, d_model: int,
                 n_layers: int, n_heads: int, max_text: int):
        super().__init__()
        if size % patch:
            raise ValueError(f"frame size {size} must be a multiple of patch {patch}")
        self.frames, self.size, self.patch, self.max_text = frames, size, patch, max_text
        self.grid = size // patch
        self.n_visual = frames * self.grid**2
        self.patch_embed = nn.Linear(3 * patch * patch, d_model)
        self.frame_pos = nn.Parameter(0.02 * torch.randn(frames, 1, d_model))
        self.patch_pos = nn.Parameter(0.02 * torch.randn(1, self.grid**2, d_model))
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.text_pos = nn.Parameter(0.02 * torch.randn(max_text, d_model))
        self.cont_pos = nn.Parameter(0.02 * torch.randn(MAX_CAPTION, d_model))
        self.blocks = nn.ModuleList(Block(d_model, n_heads, MLP(d_model, 4 * d_model))
                                    for _ in range(n_layers))
        self.ln_out = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        nn.init.normal_(self.tok_emb.weight, std=0.02)

    def patches(self, video: torch.Tensor) -> torch.Tensor:
        """(B, T, H, W, 3) on 0..255 -> (B, T, P, 3*p*p) normalised patches."""
        b, t, h, w, _ = video.shape
        p = self.patch
        x = (video.float() / 255.0 - 0.5) / 0.25
        x = x.reshape(b, t, h // p, p, w // p, p, 3).permute(0, 1, 2, 4, 3, 5, 6)
        return x.reshape(b, t, (h // p) * (w // p), p * p * 3)

    def forward(self, video: torch.Tensor, text: torch.Tensor,
                visual_weight: torch.Tensor | None = None,
                continuation: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (logits at the answer slot (B, vocab), final hidden states (B, L - 1 + T*P + 1, d)
        laid out as [question words][visual tokens][<ans>]).

        With ``continuation`` (B, K) token ids appended after the answer slot (captioning
        pretraining), the logits are (B, K, vocab): the prediction of each continuation token."""
        vis = self.patch_embed(self.patches(video))                       # (B, T, P, d)
        if visual_weight is not None:
            vis = vis * visual_weight.view(vis.shape[0], vis.shape[1], vis.shape[2], 1)
        vis = (vis + self.frame_pos + self.patch_pos).flatten(1, 2)
        txt = self.tok_emb(text) + self.text_pos[-text.shape[1]:]   # slots count from the end
        # question first, then the video, then the answer slot: under causal attention the
        # visual tokens can read the question (instruction-aware visual features)
        parts = [txt[:, :-1], vis, txt[:, -1:]]
        if continuation is not None:
            parts.append(self.tok_emb(continuation) + self.cont_pos[:continuation.shape[1]])
        x = torch.cat(parts, dim=1)
        for block in self.blocks:
            x = block(x)
        h = self.ln_out(x)
        if continuation is not None:
            k = continuation.shape[1]
            return self.head(h[:, -k - 1:-1]), h
        return self.head(h[:, -1]), h


def trim(text: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """Drop the left-padding columns that every row of the batch has (same result, less work)."""
    used = (text != pad_id).any(dim=0).nonzero()
    return text[:, int(used[0]):] if len(used) else text


def restricted_logits(logits: torch.Tensor, answer_ids: torch.Tensor) -> torch.Tensor:
    """Logits of the allowed answer tokens only: (B, vocab), (K,) -> (B, K)."""
    return logits[:, answer_ids]


def answer_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, target)


def encode_caption(text: str, vocab_index: dict[str, int]) -> list[int]:
    """Caption ids, right-padded with <pad> (id 0, ignored by the loss) to MAX_CAPTION."""
    ids = [vocab_index[w] for w in text.split()]
    if len(ids) > MAX_CAPTION:
        raise ValueError(f"caption of {len(ids)} tokens exceeds MAX_CAPTION={MAX_CAPTION}")
    return ids + [0] * (MAX_CAPTION - len(ids))


def caption_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=0)
