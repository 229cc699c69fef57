"""The interleaved multi-turn viewing policy on a video LLM (paper profile: Qwen2-VL).

One episode is a chat. The user turn shows the initial scan (``n_anchors`` uniform frames, each
an image with its frame index); every assistant turn is a short thought followed by one
operator (``<action>fine_3</action>``) or the answer (``<answer>Fighting</answer>``); the
environment (``env.ActiveEnv``: the same operators as the small profile) answers an operator
with a user turn holding the frames it acquired. The model chooses among the *valid* operator
strings and the class answers by their sequence log-likelihood (constrained decoding); its
belief over hypotheses is the softmax over the answer strings, so the AEI information term is
measured as in the small profile. A trajectory's log-probability sums the assistant tokens
only (thoughts, operators, answer): observation tokens - frames, frame indices, prompts - are
masked out, which is what iDPO needs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from components.common.multiturn_dpo import pad_sequences, qwen2_vl_image_inputs, sequence_logps

SYSTEM = ("You review a surveillance video to decide which event it shows. Classes: {classes}. "
          "Operators: fine_i (4 consecutive frames at scan frame i), backtrack_d / advance_d "
          "(4 frames d windows before / after your last look), expand (4 sparse frames around it). "
          "Think briefly, then reply <action>OPERATOR</action> or <answer>CLASS</answer>.")
IM_START, IM_END = "<|im_start|>", "<|im_end|>\n"


@dataclass
class Record:
    """What an episode did: enough to rebuild its chat exactly (for DPO and analysis)."""
    turn_frames: list[list[int]]            # frames shown in each user turn (first: the scan)
    actions: list[int] = field(default_factory=list)   # operator ids; the last is ANSWER
    thoughts: list[list[int]] = field(default_factory=list)   # thought token ids per assistant turn
    pred: int = -1
    info_gain: float = 0.0
    belief: list[float] = field(default_factory=list)   # over classes, at the last turn


class VideoLLM:
    """A Qwen2-VL-style model, its tokenizer and image processor, with the chat encoding."""

    def __init__(self, model, tokenizer, image_processor, classes, action_names):
        self.model, self.tokenizer, self.processor = model, tokenizer, image_processor
        self.classes, self.names = list(classes), list(action_names)
        cfg = model.config
        self.image_id, self.start_id, self.end_id = (cfg.image_token_id, cfg.vision_start_token_id,
                                                     cfg.vision_end_token_id)
        self.merge = int(getattr(image_processor, "merge_size", 2))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._cache: dict[str, list[int]] = {}

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def ids(self, text: str) -> list[int]:
        if text not in self._cache:
            self._cache[text] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self._cache[text]

    def patches(self, frames: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Vision patches of every frame of a video: (T, P, D) and one frame's grid (3,)."""
        out = self.processor(images=list(frames), return_tensors="pt")
        grid = out["image_grid_thw"]
        return out["pixel_values"].view(len(frames), -1, out["pixel_values"].shape[-1]), grid[0]

    def action_text(self, action: int, pred: int) -> str:
        if action == len(self.names) - 1:
            return f"<answer>{self.classes[pred]}</answer>"
        return f"<action>{self.names[action]}</action>"

    # -- the chat as token segments: (ids, is_policy) or ("frame", t) ---------------------------
    def _frames(self, frames: list[int], tokens_per_frame: int) -> list:
        segs = []
        for t in frames:
            segs.append((self.ids(f" frame {t}: "), False))
            segs.append(("frame", int(t), [self.start_id] + [self.image_id] * tokens_per_frame + [self.end_id]))
        return segs

    def conversation(self, rec: Record, n_frames: int, tokens_per_frame: int, upto: int | None = None) -> list:
        """Segments of the chat of ``rec``: prompt, scan, then (assistant, observation) turns.
        ``upto`` stops before assistant turn ``upto`` (its header included), for scoring."""
        system = SYSTEM.format(classes=", ".join(self.classes))
        segs: list = [(self.ids(f"{IM_START}system\n{system}{IM_END}"), False),
                      (self.ids(f"{IM_START}user\nThe video has {n_frames} frames. Scan:"), False)]
        segs += self._frames(rec.turn_frames[0], tokens_per_frame)
        segs.append((self.ids(IM_END), False))
        n_turns = len(rec.actions) if upto is None else upto
        for k in range(n_turns + (upto is not None)):
            segs.append((self.ids(f"{IM_START}assistant\n"), False))
            if k == n_turns:                         # the turn being decided: header only
                break
            segs.append((list(rec.thoughts[k]) if k < len(rec.thoughts) else [], True))
            segs.append((self.ids(self.action_text(rec.actions[k], rec.pred)) + self.ids(IM_END), True))
            if k + 1 < len(rec.turn_frames):
                segs.append((self.ids(f"{IM_START}user\nNew frames:"), False))
                segs += self._frames(rec.turn_frames[k + 1], tokens_per_frame)
                segs.append((self.ids(IM_END), False))
        return segs

    @staticmethod
    def flatten(segs: list) -> tuple[list[int], list[bool], list[int]]:
        ids, mask, frames = [], [], []
        for seg in segs:
            if seg[0] == "frame":
                ids += seg[2]
                mask += [False] * len(seg[2])
                frames.append(seg[1])
            else:
                ids += seg[0]
                mask += [seg[1]] * len(seg[0])
        return ids, mask, frames

    # -- log-likelihoods --------------------------------------------------------------------
    def image_inputs(self, ids: torch.Tensor, pixels: list[torch.Tensor], grid: torch.Tensor) -> dict:
        """The Qwen2-VL image inputs of ``ids`` (every shown frame's patches, in order)."""
        return qwen2_vl_image_inputs(ids, self.image_id, torch.cat(pixels), grid[None].repeat(len(pixels), 1),
                                     dtype=next(self.model.parameters()).dtype)

    def masked_logps(self, seqs: list[tuple[list[int], list[bool], list[int]]], patches: torch.Tensor,
                     grid: torch.Tensor) -> torch.Tensor:
        """Sum of log p(token | prefix) over each sequence's policy mask: (B,). Differentiable
        (the shared multi-turn DPO path: ``components.common.multiturn_dpo``)."""
        ids, attn, mask = pad_sequences([(s_ids, s_mask) for s_ids, s_mask, _ in seqs], self.pad_id)
        pixels = [patches[t] for _, _, s_frames in seqs for t in s_frames]
        return sequence_logps(self.model, ids, attn, mask, **self.image_inputs(ids, pixels, grid))

    @torch.no_grad()
    def score(self, context: list, candidates: list[list[int]], patches, grid, batch: int = 8) -> torch.Tensor:
        """log p(candidate | context) for each candidate token list: (n,)."""
        ids, _, frames = self.flatten(context)
        seqs = [(ids + c, [False] * len(ids) + [True] * len(c), frames) for c in candidates]
        return torch.cat([self.masked_logps(seqs[i:i + batch], patches, grid).cpu()
                          for i in range(0, len(seqs), batch)])

    @torch.no_grad()
    def think(self, context: list, patches, grid, max_tokens: int, sample: bool, stop: list[int]) -> list[int]:
        """A free-text thought (greedy or sampled), cut before the first operator/answer tag."""
        if max_tokens <= 0:
            return []
        ids, _, frames = self.flatten(context)
        dev = self.device
        ids_t = torch.as_tensor([ids])
        images = {k: v.to(dev) for k, v in self.image_inputs(ids_t, [patches[t] for t in frames], grid).items()}
        out = self.model.generate(input_ids=ids_t.to(dev), attention_mask=torch.ones_like(ids_t).to(dev),
                                  max_new_tokens=max_tokens, do_sample=sample, pad_token_id=self.pad_id,
                                  **images)
        new = out[0, len(ids):].tolist()
        for i, tok in enumerate(new):
            if tok in stop:
                return new[:i]
        return new

    def tokens_per_frame(self, grid: torch.Tensor) -> int:
        return int(grid.prod()) // self.merge ** 2


def entropy(p: torch.Tensor) -> float:
    return float(-(p * p.clamp(min=1e-12).log()).sum() / np.log(len(p)))


def run_episode(llm: VideoLLM, env, vid: int, patches, grid, *, mode: str = "greedy",
                rng: np.random.Generator | None = None, temperature: float = 1.0, epsilon: float = 0.0,
                thought_tokens: int = 0, label: int = -1, script_threshold: float = 0.0,
                score_batch: int = 8) -> Record:
    """One episode on video ``vid`` (an index into ``env``'s cache). mode: greedy | sample |
    script (the warm-start operators, answering the video-level ``label``)."""
    from components.anompi.policy import scripted_action

    st = env.reset(torch.tensor([vid]))
    rec = Record(turn_frames=[torch.nonzero(st.obs[0]).squeeze(1).tolist()])
    tpf = llm.tokens_per_frame(grid)
    stop = [llm.ids("<action>")[0], llm.ids("<answer>")[0]]
    answer = env.A - 1
    h_prev = None
    for k in range(env.cfg.max_steps + 1):
        tg = env.targets(st)
        valid = env.valid(st, tg)[0]
        context = llm.conversation(rec, env.T, tpf, upto=k)
        thought = [] if mode == "script" else llm.think(context, patches, grid, thought_tokens,
                                                       mode == "sample", stop)
        context = context + [(thought, True)]
        ops = [a for a in range(answer) if valid[a]]
        cands = [llm.ids(llm.action_text(a, 0)) + llm.ids("<|im_end|>\n") for a in ops]
        cands += [llm.ids(llm.action_text(answer, c)) + llm.ids("<|im_end|>\n") for c in range(len(llm.classes))]
        scores = llm.score(context, cands, patches, grid, score_batch)
        probs = torch.softmax(scores[len(ops):], -1)
        rec.belief = probs.tolist()
        h = entropy(probs)
        if h_prev is not None:
            rec.info_gain += max(0.0, h_prev - h)        # the previous operator's evidence
        h_prev = h
        if mode == "script":
            a = int(scripted_action(env, st, script_threshold)[0])
            choice = ops.index(a) if a in ops else len(ops) + label
        elif mode == "greedy":
            choice = int(scores.argmax())
        else:
            p = torch.softmax(scores / temperature, -1).numpy().astype(np.float64)
            p = (1 - epsilon) * p + epsilon / len(p)
            choice = int(rng.choice(len(p), p=p / p.sum()))
        rec.thoughts.append(thought)
        if choice >= len(ops):
            rec.actions.append(answer)
            rec.pred = choice - len(ops)
            break
        a = ops[choice]
        before = st.obs[0].clone()
        st = env.step(st, torch.tensor([a]), tg)
        rec.actions.append(a)
        rec.turn_frames.append(torch.nonzero(st.obs[0] & ~before).squeeze(1).tolist())
    return rec


def trajectory_logps(llm: VideoLLM, records: list[Record], n_frames: int, patches: list, grid) -> torch.Tensor:
    """Differentiable sum of assistant-token log-probs per record (observations masked)."""
    tpf = llm.tokens_per_frame(grid)
    return torch.cat([llm.masked_logps([llm.flatten(llm.conversation(r, n_frames, tpf))], p, grid)
                      for r, p in zip(records, patches)])
