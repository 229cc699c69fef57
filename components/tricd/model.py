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
MOTION_WORD = {m: B.MOTION_WORDS[m].split()[-1] for m in V.MOTIONS}   # still/left/right/up/down


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
    """Vision tower in Qwen2-VL's layout: ``tpatch`` frames x ``patch`` x ``patch`` pixel tubelets
    are embedded (Qwen2-VL's temporal patch size is 2), then every ``merge`` x ``merge`` block of
    patch features is merged into one visual token by an MLP (Qwen2-VL's patch merger), so a
    visual token covers ``token_px = patch * merge`` pixels of ``tpatch`` frames at patch detail."""

    def __init__(self, vocab_size: int, frames: int, size: int, patch: int, d_model: int,
                 n_layers: int, n_heads: int, max_text: int, merge: int = 1, align: bool = False,
                 tpatch: int = 1, video_first: bool = False):
        super().__init__()
        if size % (patch * merge) or frames % tpatch:
            raise ValueError(f"frame size {size} must be a multiple of patch*merge {patch * merge} "
                             f"and frames {frames} of tpatch {tpatch}")
        self.frames, self.size, self.patch, self.merge, self.max_text = frames, size, patch, merge, max_text
        self.tpatch, self.token_frames = tpatch, frames // tpatch
        self.video_first = video_first
        self.token_px = patch * merge
        self.grid = size // self.token_px
        self.n_visual = self.token_frames * self.grid**2
        self.patch_embed = nn.Linear(3 * patch * patch * tpatch + len(V.COLORS), d_model)
        self.register_buffer("colours", torch.tensor(list(V.COLORS.values()), dtype=torch.float),
                             persistent=False)
        self.merger = None if merge == 1 else nn.Sequential(
            nn.LayerNorm(merge * merge * d_model), nn.Linear(merge * merge * d_model, 2 * d_model),
            nn.GELU(), nn.Linear(2 * d_model, d_model))
        self.frame_pos = nn.Parameter(0.02 * torch.randn(self.token_frames, 1, d_model))
        self.patch_pos = nn.Parameter(0.02 * torch.randn(1, self.grid**2, d_model))
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.text_pos = nn.Parameter(0.02 * torch.randn(max_text, d_model))
        self.cont_pos = nn.Parameter(0.02 * torch.randn(MAX_CAPTION, d_model))
        self.blocks = nn.ModuleList(Block(d_model, n_heads, MLP(d_model, 4 * d_model))
                                    for _ in range(n_layers))
        # grounding head on the vision tower's output (its pretraining only): which colour-shape
        # objects each visual token shows, how they move, and the scene of each frame
        self.ground_head = nn.Linear(d_model, len(V.PAIRS) + len(V.MOTIONS) + len(V.SCENES))
        self.align = align
        index = {w: i for i, w in enumerate(build_vocab())}
        self.register_buffer("pair_words", torch.tensor([[index[c], index[s]] for c, s in V.PAIRS]),
                             persistent=False)
        self.register_buffer("scene_words", torch.tensor([index[s] for s in V.SCENES]), persistent=False)
        self.register_buffer("motion_words", torch.tensor([index[MOTION_WORD[m]] for m in V.MOTIONS]),
                             persistent=False)
        self.ln_out = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        nn.init.normal_(self.tok_emb.weight, std=0.02)

    def patches(self, video: torch.Tensor) -> torch.Tensor:
        """(B, T, H, W, 3) on 0..255 -> (B, T', P, m*m, tp*p*p*3) normalised tubelets, grouped
        so that the m*m patches of one visual token are adjacent (tokens row-major over the grid)."""
        b, t, h, w, _ = video.shape
        p, m, g, tp = self.patch, self.merge, self.grid, self.tpatch
        x = (video.float() / 255.0 - 0.5) / 0.25
        x = x.reshape(b, t // tp, tp, g, m, p, g, m, p, 3).permute(0, 1, 3, 6, 4, 7, 2, 5, 8, 9)
        return x.reshape(b, t // tp, g * g, m * m, tp * p * p * 3)

    def colour_membership(self, video: torch.Tensor) -> torch.Tensor:
        """Fixed colour-opponent front end: per tubelet patch, the mean membership of its pixels
        in each object colour (Gaussian, sigma 40 on 0..255): (B, T', P, m*m, n_colours). Being a
        function of the pixels, it is changed by every perturbation tool like the pixels are."""
        dist = ((video.float().unsqueeze(-2) - self.colours) ** 2).sum(-1)   # (B, T, H, W, C)
        member = torch.exp(-dist / (2 * 40.0 ** 2))
        b, t, h, w, c = member.shape
        p, m, g, tp = self.patch, self.merge, self.grid, self.tpatch
        x = member.reshape(b, t // tp, tp, g, m, p, g, m, p, c).permute(0, 1, 3, 6, 4, 7, 2, 5, 8, 9)
        return x.reshape(b, t // tp, g * g, m * m, tp * p * p, c).mean(-2)

    def encoder(self, video: torch.Tensor) -> torch.Tensor:
        """Patch embedding + merger: (B, T, H, W, 3) -> (B, T', P, d)."""
        x = torch.cat([self.patches(video), self.colour_membership(video)], -1)
        x = self.patch_embed(x)                                          # (B, T', P, m*m, d)
        return x.squeeze(3) if self.merger is None else self.merger(x.flatten(3))

    def grounding_logits(self, feats: torch.Tensor) -> torch.Tensor:
        return self.ground_head(feats)

    def vision_tower(self, video: torch.Tensor) -> torch.Tensor:
        """(B, T, H, W, 3) -> visual token features (B, T', P, d) before positions are added.

        The projector adds the word embeddings of what the grounding head sees in the token
        (colour + shape words of each detected object, its motion word, the scene word): visual
        tokens live in the language model's embedding space, as a VLLM's projector is aligned
        to it in pretraining."""
        return self.project(self.tower_state(video))

    def tower_state(self, video: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The encoder's token features and the grounding logits on them: everything of the
        vision tower that does not read the word embeddings (cached when the tower is frozen)."""
        feats = self.encoder(video)
        return feats, self.grounding_logits(feats)

    def project(self, state: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        feats, grounding = state
        if not self.align:
            return feats
        pairs, motion, scene = split_grounding(grounding)
        words = torch.sigmoid(pairs) @ self.tok_emb(self.pair_words).sum(1) \
            + torch.sigmoid(motion) @ self.tok_emb(self.motion_words) \
            + torch.softmax(scene, -1) @ self.tok_emb(self.scene_words)
        return feats + words

    def forward(self, video: torch.Tensor, text: torch.Tensor,
                visual_weight: torch.Tensor | None = None,
                continuation: torch.Tensor | None = None,
                tower: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (logits at the answer slot (B, vocab), final hidden states (B, L - 1 + T*P + 1, d)
        laid out as [question words][visual tokens][<ans>], or [visual tokens][question words][<ans>]
        with ``video_first``).

        With ``continuation`` (B, K) token ids appended after the answer slot (captioning
        pretraining), the logits are (B, K, vocab): the prediction of each continuation token.
        ``tower``: a cached ``tower_state`` of the videos (a frozen vision tower), used instead of
        running the tower on ``video``."""
        vis = self.vision_tower(video) if tower is None else self.project(tower)   # (B, T, P, d)
        if visual_weight is not None:
            vis = vis * visual_weight.view(vis.shape[0], vis.shape[1], vis.shape[2], 1)
        vis = (vis + self.frame_pos + self.patch_pos).flatten(1, 2)
        txt = self.tok_emb(text) + self.text_pos[-text.shape[1]:]   # slots count from the end
        # v1-v4: question first, then the video (the visual tokens read the question); v5
        # ``video_first``: the video, then the (left-padded) question, as a VLLM's chat prompt
        # puts the video before the question: each option's words can then read the video
        parts = [vis, txt[:, :-1], txt[:, -1:]] if self.video_first else [txt[:, :-1], vis, txt[:, -1:]]
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


def split_grounding(logits: torch.Tensor):
    """(..., 12 + 5 + 4) grounding logits -> colour-shape, motion and scene parts."""
    n_pairs, n_motion = len(V.PAIRS), len(V.MOTIONS)
    return logits[..., :n_pairs], logits[..., n_pairs:n_pairs + n_motion], logits[..., n_pairs + n_motion:]


def grounding_loss(model: "ToyVLLM", video: torch.Tensor, labels: torch.Tensor,
                   scene: torch.Tensor) -> torch.Tensor:
    """Vision-tower pretraining: per-token colour-shape and motion presence (BCE, targets from
    ``video.token_labels``) + per-frame scene (CE)."""
    pairs, motion, scene_logits = split_grounding(model.grounding_logits(model.encoder(video)))
    tokens = F.binary_cross_entropy_with_logits(torch.cat([pairs, motion], -1), labels)
    scene_logits = scene_logits.mean(2).flatten(0, 1)                   # (B*T', 4)
    return tokens + F.cross_entropy(scene_logits, scene.repeat_interleave(scene_logits.shape[0] // len(scene)))


def caption_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=0)
