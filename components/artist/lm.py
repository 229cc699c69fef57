"""The language-model policy: ARTIST's text protocol on a causal LM (Qwen3).

One policy, two roles, as in the paper. Everything the model reads or writes is text:

- **Views.** A view is a window ``[start, end)`` of the series, area-resampled to at most
  ``views.budget`` points (``views.area_resample``) and normalised by the overview's mean and
  std (as the tiny policy's views), written as integers ``round(value_scale * z)`` clipped to
  ``±value_clip`` and separated by spaces. The overview is the whole series (the official
  ``include_full_ts_initially``).
- **Controller.** Reads the question, the options and the overview; writes its zoom rounds,
  each ``<think> … </think> <tool_call> {"name": "timeseries_zoom_in_tool", "arguments":
  {"ts_seg": [start, end]}} </tool_call>``, then ``<think> … </think> <answer> ACCEPT </answer>``.
  All rounds come in one completion (the shared GRPO path is single-turn), so the controller
  plans from the overview; the paper re-prompts it after each reasoner turn (CLAIMS.md says so).
  Each round is scored with the official format rules (``rewards.format_score``).
- **Reasoner.** Reads the question, the overview and the zoomed segments (only those); writes
  ``<think> … </think> <answer> X </answer>`` with X an option letter.

Texts keep every atom separated by one space (JSON included, which stays valid JSON), so the
tiny word-level tokenizer built here round-trips them exactly; a real tokenizer (Qwen3's)
reads them as ordinary text.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

from components.artist.rewards import format_score
from components.artist.views import area_resample

ZOOM_TOOL = "timeseries_zoom_in_tool"
LETTERS = "ABCDEFGHIJ"
SYSTEM = "you are a helpful assistant that can answer questions about time series data."
_TURN_END = re.compile(r"(?<=</tool_call>)")
_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.S)
_THINK = re.compile(r"<think>.*?</think>", re.S)
_SEG = re.compile(r'"ts_seg"\s*:\s*\[\s*(-?\d+)\s*,\s*(-?\d+)\s*\]')


# ---------------------------------------------------------------- views as text
def view_points(start: int, end: int, budget: int) -> int:
    """Points a view of ``[start, end)`` is written with: the budget, or fewer for short windows."""
    return int(max(1, min(budget, end - start)))


def overview_stats(series: np.ndarray, budget: int) -> tuple[float, float]:
    """Mean and std of the overview (the coarse full view): the only normalisation any view gets,
    so no statistic of unselected samples reaches the model."""
    coarse = area_resample(np.asarray(series, dtype=np.float64), view_points(0, len(series), budget))
    return float(coarse.mean()), float(coarse.std()) + 1e-3


def view_values(series: np.ndarray, start: int, end: int, budget: int, stats: tuple[float, float]) -> np.ndarray:
    seg = np.asarray(series[start:end], dtype=np.float64)
    return (area_resample(seg, view_points(start, end, budget)) - stats[0]) / stats[1]


def values_text(values: np.ndarray, scale: float, clip: int) -> str:
    q = np.clip(np.rint(np.asarray(values, dtype=np.float64) * scale), -clip, clip).astype(int)
    return " ".join(str(int(v)) for v in q)


# ---------------------------------------------------------------- prompts and targets
@dataclass(frozen=True)
class Question:
    """One QA item as the LM sees it (the answer stays out of every prompt)."""
    text: str
    options: tuple[str, ...]
    series: np.ndarray
    answer: int

    @property
    def length(self) -> int:
        return len(self.series)


@dataclass(frozen=True)
class TextSettings:
    budget: int = 128
    max_zooms: int = 4
    value_scale: float = 2.0
    value_clip: int = 12


def _options(q: Question) -> str:
    return " ".join(f"( {LETTERS[i]} ) {o}" for i, o in enumerate(q.options))


def _overview(q: Question, s: TextSettings, stats) -> str:
    values = values_text(view_values(q.series, 0, q.length, s.budget, stats), s.value_scale, s.value_clip)
    return f"overview [ 0 , {q.length} ] : {values}"


def controller_messages(q: Question, s: TextSettings) -> list[dict]:
    stats = overview_stats(q.series, s.budget)
    user = (f"role controller . question : {q.text} options : {_options(q)} . the series has {q.length} "
            f"points . {_overview(q, s, stats)} . zoom into at most {s.max_zooms} segments with "
            f"{ZOOM_TOOL} , one call per round , then answer ACCEPT .")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def reasoner_messages(q: Question, windows: list[tuple[int, int]], s: TextSettings) -> list[dict]:
    stats = overview_stats(q.series, s.budget)
    parts = [_overview(q, s, stats)]
    for a, b in windows:
        parts.append(f"segment [ {a} , {b} ] : "
                     + values_text(view_values(q.series, a, b, s.budget, stats), s.value_scale, s.value_clip))
    user = (f"role reasoner . question : {q.text} options : {_options(q)} . the series has {q.length} "
            f"points . {' . '.join(parts)} . answer with one option letter .")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def tool_call_text(start: int, end: int) -> str:
    return ('<tool_call> { "name" : "' + ZOOM_TOOL + '" , "arguments" : { "ts_seg" : [ '
            f"{int(start)} , {int(end)} ] }} }} </tool_call>")


def plan_text(windows: list[tuple[int, int]]) -> str:
    """The controller's SFT target: one zoom round per window, then ACCEPT."""
    turns = [f"<think> zoom {i + 1} </think> {tool_call_text(a, b)}" for i, (a, b) in enumerate(windows)]
    return " ".join(turns + ["<think> enough </think> <answer> ACCEPT </answer>"])


def answer_text(answer: int) -> str:
    return f"<think> read </think> <answer> {LETTERS[answer]} </answer>"


FAMILY_OPTIONS = {
    "localize": ("first quarter", "second quarter", "third quarter", "fourth quarter"),
    "compare": ("the earlier one", "the later one"),
    "etiology": ("spike", "level shift", "trend change", "variance burst"),
    "count": ("0", "1", "2", "3", "4"),
    "rhythm": ("period 48", "period 24", "period 12", "period 6", "period 3"),
    "short": ("up trend", "down trend", "periodic", "single spike"),
}


def family_question(family: str, args: list[int], length: int, n_fine: int, n_quarters: int) -> str:
    """The question of a generated family in words (the tiny policy gets it as a family id)."""
    from components.artist.views import action_windows

    if family == "compare":
        wins = action_windows(length, n_fine, n_quarters)
        (a0, a1), (b0, b1) = wins[int(args[0])], wins[int(args[1])]
        return (f"two segments [ {a0} , {a1} ] and [ {b0} , {b1} ] each hold a short oscillation burst . "
                "which burst is stronger ?")
    return {"localize": "which quarter of the series holds the short oscillation burst ?",
            "etiology": "which cause explains the anomaly in the series ?",
            "count": "how many of the bumps in the series carry a short oscillation burst ?",
            "rhythm": "what is the dominant period of the series in samples ?",
            "short": "which pattern does the short series show ?"}[family]


# ---------------------------------------------------------------- parsing and format
@dataclass(frozen=True)
class Plan:
    windows: list[tuple[int, int]]     # valid zooms in order (at most max_zooms, no repeats)
    format: float                      # official rule: per-round scores averaged; -1 on an error
    error: bool
    rounds: int                        # zoom rounds written (before capping at max_zooms)


def split_rounds(text: str) -> list[str]:
    """A plan completion cut after each ``</tool_call>``: one controller round per piece."""
    return [p for p in _TURN_END.split(text) if p.strip()]


def parse_plan(text: str, length: int, max_zooms: int) -> Plan:
    """Windows of a controller completion and its format score. Non-final rounds must each hold
    one valid zoom call, the final round ACCEPT (``rewards.format_score``); any round below 0 makes
    the trajectory a format error (the official ``_compute_format_list``)."""
    rounds = split_rounds(text)
    if not rounds:
        return Plan([], -1.0, True, 0)
    scores = [format_score(r, length, final_round=(i == len(rounds) - 1)) for i, r in enumerate(rounds)]
    error = min(scores) < 0
    windows: list[tuple[int, int]] = []
    for r in rounds[:-1]:
        m = _SEG.search(r)
        if m:
            a, b = max(0, int(m.group(1))), min(length, int(m.group(2)))
            if a < b and (a, b) not in windows:
                windows.append((a, b))
    return Plan(windows[:max_zooms], -1.0 if error else float(np.mean(scores)), error, len(rounds) - 1)


def parse_answer(text: str, n_options: int) -> int | None:
    """The option index of the last ``<answer>`` block, or None when there is no valid letter."""
    found = _ANSWER.findall(text)
    if not found:
        return None
    letter = found[-1].strip().upper()
    return LETTERS.index(letter) if len(letter) == 1 and letter in LETTERS[:n_options] else None


def reasoner_format(text: str, n_options: int) -> float:
    """1 for one think block and a valid answer letter; 0.5 with a missing or repeated think
    block; -1 without a valid answer (the reasoner's format term)."""
    if parse_answer(text, n_options) is None:
        return -1.0
    return 1.0 if len(_THINK.findall(text)) == 1 else 0.5


def fraction_read(windows: list[tuple[int, int]], length: int) -> float:
    """Share of the series covered by the union of the zoomed windows (the overview not counted)."""
    covered = np.zeros(int(length), dtype=bool)
    for a, b in windows:
        covered[max(0, a):min(length, b)] = True
    return float(covered.mean()) if length else 0.0


def completion_text(completion) -> str:
    """TRL passes conversational completions as ``[{"role": "assistant", "content": ...}]``."""
    if isinstance(completion, list):
        return " ".join(str(m.get("content", "")) for m in completion)
    return str(completion)


# ---------------------------------------------------------------- the tiny tokenizer
def protocol_words(max_length: int, value_clip: int) -> list[str]:
    """Every word the protocol itself can write (tags, JSON atoms, integers, option letters)."""
    words = {"<think>", "</think>", "<tool_call>", "</tool_call>", "<answer>", "</answer>", "ACCEPT",
             "{", "}", "}}", "[", "]", ",", ":", "(", ")", ".", '"name"', f'"{ZOOM_TOOL}"', '"arguments"',
             '"ts_seg"', "zoom", "enough", "read", *LETTERS}
    words |= {str(i) for i in range(max_length + 1)} | {str(-i) for i in range(value_clip + 1)}
    return sorted(words)


def build_tokenizer(texts: list[str], max_length: int, value_clip: int):
    """A word-level tokenizer (split on whitespace only) over the protocol's words and the words of
    ``texts`` (prompts of the training questions), wrapped as ``PreTrainedTokenizerFast`` with the
    tiny chat template, so the tiny Qwen3 is driven by the same calls as Qwen3-4B's tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from components.common.tiny_tokenizer import CHAT_TEMPLATE, ROLE_TOKENS, SPECIALS

    words = set(protocol_words(max_length, value_clip))
    for t in texts:
        words.update(t.split())
    ordered = list(dict.fromkeys([*SPECIALS, *ROLE_TOKENS, *sorted(words - set(SPECIALS) - set(ROLE_TOKENS))]))
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(ordered)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)    # joins words with one space
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                   bos_token="<s>", eos_token="</s>",
                                   additional_special_tokens=list(ROLE_TOKENS))
    fast.chat_template = CHAT_TEMPLATE
    return fast


# ---------------------------------------------------------------- running the policy
class LMRunner:
    """Batched sampling for both roles on one model (``components.common.generation``)."""

    def __init__(self, model, tokenizer, batch_size: int = 32):
        self.model, self.tok, self.batch_size = model, tokenizer, batch_size

    def prompt(self, messages: list[dict]) -> str:
        return self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    @torch.no_grad()
    def sample(self, messages: list[list[dict]], n: int, temperature: float, max_new_tokens: int) -> list[list[str]]:
        """``n`` completions per prompt (temperature 0 = greedy); uses torch's global RNG."""
        from components.common.generation import SamplingParams, TransformersGenerator

        was_training = self.model.training
        self.model.eval()
        try:
            gen = TransformersGenerator(self.model, self.tok, batch_size=max(self.batch_size, n))
            groups = gen.sample([self.prompt(m) for m in messages],
                                SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature,
                                               num_samples=n))
        finally:
            self.model.train(was_training)
        return [[c.text for c in g] for g in groups]


def sft_batch(tok, prompts: list[list[dict]], targets: list[str], max_len: int | None = None):
    """Right-padded (chat prompt + target + EOS) ids; the loss sees the target and EOS only."""
    seqs, starts = [], []
    for messages, target in zip(prompts, targets):
        p = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        p_ids = tok(p, add_special_tokens=False)["input_ids"]
        t_ids = tok(target, add_special_tokens=False)["input_ids"]
        ids = p_ids + t_ids + [tok.eos_token_id]
        if max_len:
            ids = ids[:max_len]
        seqs.append(ids)
        starts.append(len(p_ids))
    width = max(map(len, seqs))
    x = torch.full((len(seqs), width), tok.pad_token_id, dtype=torch.long)
    labels = torch.full((len(seqs), width), -100, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for b, (ids, st) in enumerate(zip(seqs, starts)):
        x[b, :len(ids)] = torch.tensor(ids)
        labels[b, st:len(ids)] = torch.tensor(ids[st:])
        attn[b, :len(ids)] = 1
    return x, attn, labels


def sft_loss(model, batch) -> torch.Tensor:
    x, attn, labels = batch
    device = next(model.parameters()).device
    return model(input_ids=x.to(device), attention_mask=attn.to(device), labels=labels.to(device)).loss

