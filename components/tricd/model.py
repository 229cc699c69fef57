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


# v10 (issue 39) compound object words: the toy tokenizer merges each adjacent "<colour> <shape>"
# into ONE vocabulary id (like a BPE merge, "red cube" -> "red_cube"); the aligned projector adds
# the embedding of the same id for the colour-shape pair a visual token holds. Appended after the
# v1-v9 vocabulary, so every earlier id is unchanged; off by default (``backbone.compound``).
COMPOUNDS = tuple(f"{c}_{s}" for c, s in V.PAIRS)


def build_vocab(compound: bool = False) -> list[str]:
    words: set[str] = set()
    texts = ["is it true that ? and which is true ? there is a the scene is camera before",
             B.NONE_OPTION, B.ALL_OPTION, " ".join(B.RELATIONS), " ".join(B.MOTION_WORDS.values()),
             " ".join(B.CAMERA_WORDS.values()), " ".join(V.COLORS), " ".join(V.SHAPES),
             " ".join(V.SCENES), "appears disappears yes no A B C", CAPTION_PROMPT, ".", *TOOL_TEXT.values()]
    for text in texts:
        words.update(text.split())
    return [PAD, ANS] + sorted(words) + (list(COMPOUNDS) if compound else [])


def tokenize(text: str, compound: bool = False) -> list[str]:
    """Whitespace words; with ``compound`` every adjacent "<colour> <shape>" is merged into one
    token "<colour>_<shape>" (left to right, as a BPE merge rule applies)."""
    words, out, i = text.split(), [], 0
    while i < len(words):
        if compound and i + 1 < len(words) and words[i] in V.COLORS and words[i + 1] in V.SHAPES:
            out.append(f"{words[i]}_{words[i + 1]}")
            i += 2
        else:
            out.append(words[i])
            i += 1
    return out


def detokenize(tokens: list[str]) -> str:
    """Inverse of ``tokenize``: compound tokens are split back into their two words."""
    return " ".join(t.replace("_", " ") if t in COMPOUNDS else t for t in tokens)


def encode(text: str, vocab_index: dict[str, int], max_text: int, compound: bool = False) -> list[int]:
    """Word ids + <ans>, left-padded to max_text (the answer slot is always the last one).
    ``compound`` (v10): adjacent colour + shape words become one compound id (``tokenize``)."""
    ids = [vocab_index[w] for w in tokenize(text, compound)] + [vocab_index[ANS]]
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
                 tpatch: int = 1, video_first: bool = False, context: int = 0, camera: bool = False,
                 pixel_colour: bool = False, pos_weight: float = 1.0, token_weight: float = 1.0,
                 feat_scale: float = -1.0, compound: bool = False):
        super().__init__()
        if size % (patch * merge) or frames % tpatch:
            raise ValueError(f"frame size {size} must be a multiple of patch*merge {patch * merge} "
                             f"and frames {frames} of tpatch {tpatch}")
        self.frames, self.size, self.patch, self.merge, self.max_text = frames, size, patch, merge, max_text
        self.tpatch, self.token_frames = tpatch, frames // tpatch
        self.video_first = video_first
        # v7: the merger of each visual token also reads ``context`` patches around its own
        # m x m block (zero-padded at the frame border), so an object whose centre lies in the
        # token is seen whole even when it straddles the token border (0 = v1-v6)
        self.context = context
        self.token_px = patch * merge
        self.grid = size // self.token_px
        self.n_visual = self.token_frames * self.grid**2
        # v7 ``pixel_colour``: the colour front end gives every pixel's membership (a colour mask
        # of the patch, its shape visible) instead of the patch mean (v1-v6)
        self.pixel_colour = pixel_colour
        self.pos_weight = pos_weight       # v7: BCE weight of the (rare, ~1 %) positive grounding labels
        self.token_weight = token_weight   # v7: weight of the per-token BCE against the scene / camera CE
        # v7: the projector's feature part. v1-v6 (-1) added the tower's raw features, whose norm
        # (30-50) swamps the word part (~1) and the position embeddings (~0.7) after the LM's
        # pre-norm; >= 0: the features are layer-normed and scaled by this (0 = word part only)
        self.feat_scale = feat_scale
        n_colour = len(V.COLORS) * (patch * patch * tpatch if pixel_colour else 1)
        self.patch_embed = nn.Linear(3 * patch * patch * tpatch + n_colour, d_model)
        self.register_buffer("colours", torch.tensor(list(V.COLORS.values()), dtype=torch.float),
                             persistent=False)
        k = (merge + 2 * context) ** 2
        self.merger = None if merge == 1 and not context else nn.Sequential(
            nn.LayerNorm(k * d_model), nn.Linear(k * d_model, 2 * d_model),
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
        # v7 ``camera``: also the camera operation of the video (pooled over all its tokens)
        self.camera = camera
        self.ground_head = nn.Linear(d_model, len(V.PAIRS) + len(V.MOTIONS) + len(V.SCENES)
                                     + (len(V.CAMERAS) if camera else 0))
        self.align = align
        # v10: the vocabulary holds the compound colour-shape ids, and the projector adds the
        # compound id's embedding for each grounded pair (beside its colour and shape words)
        self.compound = compound
        index = {w: i for i, w in enumerate(build_vocab(compound))}
        if compound and vocab_size != len(index):
            raise ValueError(f"vocab_size {vocab_size} != {len(index)} words (compound={compound})")
        if compound:
            self.register_buffer("pair_compound", torch.tensor([index[f"{c}_{s}"] for c, s in V.PAIRS]),
                                 persistent=False)
        self.register_buffer("pair_words", torch.tensor([[index[c], index[s]] for c, s in V.PAIRS]),
                             persistent=False)
        self.register_buffer("scene_words", torch.tensor([index[s] for s in V.SCENES]), persistent=False)
        self.register_buffer("motion_words", torch.tensor([index[MOTION_WORD[m]] for m in V.MOTIONS]),
                             persistent=False)
        self.register_buffer("camera_words", torch.tensor(   # "camera" + the two words of the operation
            [[index[w] for w in ("camera", *B.CAMERA_WORDS[c].split())] for c in V.CAMERAS]), persistent=False)
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

    def patch_grid(self, video: torch.Tensor) -> torch.Tensor:
        """Embedded tubelet patches on their grid: (B, T, H, W, 3) -> (B, T', H/p, W/p, d); the
        same per-patch input (tubelet pixels, colour membership) as ``patches``."""
        b, t, h, w, _ = video.shape
        p, tp, gp = self.patch, self.tpatch, self.size // self.patch
        x = (video.float() / 255.0 - 0.5) / 0.25
        x = x.reshape(b, t // tp, tp, gp, p, gp, p, 3).permute(0, 1, 3, 5, 2, 4, 6, 7)
        x = x.reshape(b, t // tp, gp, gp, tp * p * p * 3)
        dist = ((video.float().unsqueeze(-2) - self.colours) ** 2).sum(-1)
        member = torch.exp(-dist / (2 * 40.0 ** 2))
        c = member.shape[-1]
        member = member.reshape(b, t // tp, tp, gp, p, gp, p, c).permute(0, 1, 3, 5, 2, 4, 6, 7)
        member = member.reshape(b, t // tp, gp, gp, tp * p * p, c)
        member = member.flatten(-2) if self.pixel_colour else member.mean(-2)
        return self.patch_embed(torch.cat([x, member], -1))

    def encoder(self, video: torch.Tensor) -> torch.Tensor:
        """Patch embedding + merger: (B, T, H, W, 3) -> (B, T', P, d)."""
        if self.context or self.pixel_colour:
            e = self.patch_grid(video)                                   # (B, T', gp, gp, d)
            b, tt, gp, _, d = e.shape
            k, m = self.merge + 2 * self.context, self.merge
            win = F.unfold(e.permute(0, 1, 4, 2, 3).reshape(b * tt, d, gp, gp), kernel_size=k,
                           padding=self.context, stride=m)               # (B*T', d*k*k, G*G)
            return self.merger(win.reshape(b, tt, d * k * k, -1).transpose(2, 3))
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
        if self.feat_scale >= 0:
            feats = self.feat_scale * F.layer_norm(feats, feats.shape[-1:])
        if not self.align:
            return feats
        pairs, motion, scene = split_grounding(grounding)
        pair_emb = self.tok_emb(self.pair_words).sum(1)
        if self.compound:
            pair_emb = pair_emb + self.tok_emb(self.pair_compound)
        words = torch.sigmoid(pairs) @ pair_emb \
            + torch.sigmoid(motion) @ self.tok_emb(self.motion_words) \
            + torch.softmax(scene, -1) @ self.tok_emb(self.scene_words)
        if self.camera:   # one camera reading per video, added to every visual token
            cam = torch.softmax(camera_grounding(grounding).mean((1, 2)), -1) @ self.tok_emb(self.camera_words).sum(1)
            words = words + cam[:, None, None]
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
    """(..., 12 + 5 + 4 [+ 4]) grounding logits -> colour-shape, motion and scene parts."""
    n_pairs, n_motion, n_scene = len(V.PAIRS), len(V.MOTIONS), len(V.SCENES)
    a = n_pairs + n_motion
    return logits[..., :n_pairs], logits[..., n_pairs:a], logits[..., a:a + n_scene]


def camera_grounding(logits: torch.Tensor) -> torch.Tensor:
    """The camera part of the grounding logits (v7 ``camera``; empty without it)."""
    return logits[..., len(V.PAIRS) + len(V.MOTIONS) + len(V.SCENES):]


def grounding_loss(model: "ToyVLLM", video: torch.Tensor, labels: torch.Tensor,
                   scene: torch.Tensor) -> torch.Tensor:
    """Vision-tower pretraining: per-token colour-shape and motion presence (BCE, targets from
    ``video.token_labels``) + per-frame scene (CE) [+ per-video camera (CE) when ``scene`` is
    (B, 2): scene and camera indices]."""
    camera = None
    if scene.ndim == 2:
        scene, camera = scene[:, 0], scene[:, 1]
    grounding = model.grounding_logits(model.encoder(video))
    pairs, motion, scene_logits = split_grounding(grounding)
    weight = None if model.pos_weight == 1.0 else torch.tensor(model.pos_weight)
    tokens = F.binary_cross_entropy_with_logits(torch.cat([pairs, motion], -1), labels, pos_weight=weight)
    scene_logits = scene_logits.mean(2).flatten(0, 1)                   # (B*T', 4)
    loss = model.token_weight * tokens + F.cross_entropy(scene_logits, scene.repeat_interleave(scene_logits.shape[0] // len(scene)))
    if camera is not None and model.camera:
        loss = loss + F.cross_entropy(camera_grounding(grounding).mean((1, 2)), camera)
    return loss


def caption_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=0)


def mimetic_init(blocks: nn.ModuleList, generator: torch.Generator, qk: tuple[float, float] = (0.7, 0.7),
                 vo: tuple[float, float] = (0.4, 0.4)) -> None:
    """Mimetic initialisation of self-attention (Trockman & Kolter, ICML 2023): every head's
    W_q^T W_k starts near ``a Z + b I`` and the layer's W_v^T W_o near ``a Z - b I`` (Z ~ N(0, 1/d)),
    the structure trained attention layers show. With W_q^T W_k ~ I a token attends to tokens whose
    embedding resembles its own from step 0, so a question word finds the visual token that carries
    the same word without first escaping a long plateau (CLAIMS "Calibration v11")."""
    for block in blocks:
        attn = block.attn
        d = attn.proj.weight.shape[0]
        d_head = d // attn.n_heads

        def target(a: float, b: float, sign: float) -> torch.Tensor:
            z = torch.randn(d, d, generator=generator) / d**0.5
            return a * z + sign * b * torch.eye(d)

        wq, wk, wv = attn.qkv.weight.data.split(d, dim=0)        # each (d_out, d_in); q = x W^T
        for h in range(attn.n_heads):                           # best rank-d_head fit per head
            u, s, vh = torch.linalg.svd(target(*qk, 1.0))
            root = s[:d_head].sqrt()
            wq[h * d_head:(h + 1) * d_head] = (u[:, :d_head] * root).T
            wk[h * d_head:(h + 1) * d_head] = (vh[:d_head].T * root).T
        u, s, vh = torch.linalg.svd(target(*vo, -1.0))          # W_v^T W_o^T = U S V^T
        wv.copy_((u * s.sqrt()).T)
        attn.proj.weight.data.copy_((s.sqrt()[:, None] * vh).T)
