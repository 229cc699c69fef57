"""The policy: a transformers causal LM (a tiny ``Qwen3ForCausalLM`` in the small profile,
Qwen3-4B-Instruct in the paper's) driven through its tokenizer's chat template.

Two reply styles share the calls. ``statements`` (small profile): the tokenizer is word-level
(``components.common.tiny_tokenizer``) over the synthetic world's dialogue words plus one token
per statement of ``ontology.PHRASES`` (``s_<id>``), so a reply is a short run of statement
tokens. The judge reads the statement tokens of the decoded text and ignores any other word.
``text`` (paper profile):
the policy reads the whole conversation and writes free text (sampled through
``components.common.generation``'s transformers backend on the model's device; vLLM is not
installed here), which the rubric judge grades item by item.

A policy folder holds ``orbit_policy.json`` ({style, max_response, device, and ``source`` when
the weights live elsewhere: the paper's base is the user's checkpoint folder, not a copy}).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from components.orbit.ontology import PHRASE_IDS, PHRASES, user_text

PROMPT_WORDS = 46      # the policy reads the most recent user words (the old decoder's window)


def statement_token(pid: str) -> str:
    return "s_" + pid.replace(":", "_")


TOKEN_TO_PHRASE = {statement_token(p): p for p in PHRASE_IDS}


def chat_prompt(prompt: list[dict], words: int = PROMPT_WORDS) -> list[dict]:
    """The policy's input: the user turns (the assistant turns of our dialogues are constant),
    the most recent ``words`` words."""
    return [{"role": "user", "content": " ".join(user_text(prompt).split()[-words:])}]


def statements_of(text: str) -> list[str]:
    """Statement ids said in a decoded reply, in order, each once; other words are ignored."""
    out: list[str] = []
    for w in text.split():
        pid = TOKEN_TO_PHRASE.get(w)
        if pid is not None and pid not in out:
            out.append(pid)
    return out


def render(statements: list[str]) -> str:
    return " ".join(PHRASES[p] for p in statements)


def build_tokenizer(prompts: list[list[dict]]):
    from components.common.tiny_tokenizer import train_tokenizer

    texts = [chat_prompt(p)[0]["content"] for p in prompts] + [" ".join(TOKEN_TO_PHRASE)]
    return train_tokenizer(texts, "word", vocab_size=100_000)


STYLES = ("statements", "text")
POLICY_FILE = "orbit_policy.json"
TEXT_BATCH = 16        # free-text replies generated together (a 4B model's KV cache for 16 x 10k tokens fits)


class LMPolicy:
    """A causal LM + tokenizer that answers consultation prompts with at most ``max_response``
    new tokens."""

    def __init__(self, model, tokenizer, max_response: int, style: str = "statements", device: str = "cpu"):
        if style not in STYLES:
            raise ValueError(f"policy style must be one of {STYLES}, got {style!r}")
        self.model, self.tokenizer, self.max_response = model, tokenizer, max_response
        self.style, self.device = style, device

    def messages(self, prompt: list[dict]) -> list[dict]:
        """What the policy reads: the recent user words (statements) or the whole conversation."""
        return chat_prompt(prompt) if self.style == "statements" else [dict(m) for m in prompt]

    def parse(self, text: str) -> list[str]:
        """Statement ids of a reply (the rule judge's input); free text has none."""
        return statements_of(text) if self.style == "statements" else []

    def reply(self, text: str) -> tuple[list[str], str]:
        """(statement ids, the reply text a judge reads)."""
        if self.style == "statements":
            st = statements_of(text)
            return st, render(st)
        return [], text.strip()

    def prompt_ids(self, prompt: list[dict]) -> list[int]:
        out = self.tokenizer.apply_chat_template(self.messages(prompt), add_generation_prompt=True, tokenize=True)
        return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)

    def reply_ids(self, statements: list[str]) -> list[int]:
        vocab = self.tokenizer.get_vocab()
        return [vocab[statement_token(p)] for p in statements] + [self.tokenizer.eos_token_id]

    @torch.no_grad()
    def sample(self, prompts: list[list[dict]], n: int, temperature: float, top_p: float = 1.0
               ) -> list[str]:
        """n decoded replies per prompt (consecutive); temperature 0 = greedy. Uses torch's
        global generator (seed it first for reproducible replies)."""
        if self.style == "text":
            return self._sample_text(prompts, n, temperature, top_p)
        tok, pad = self.tokenizer, self.tokenizer.pad_token_id
        ids = [self.prompt_ids(p) for p in prompts]
        width = max(map(len, ids))
        x = torch.tensor([[pad] * (width - len(r)) + r for r in ids])
        mask = (torch.arange(width)[None, :] >= torch.tensor([width - len(r) for r in ids])[:, None]).long()
        kw = dict(do_sample=True, temperature=temperature, top_p=top_p) if temperature > 0 else dict(do_sample=False)
        self.model.eval()
        out = self.model.generate(input_ids=x.repeat_interleave(n, 0), attention_mask=mask.repeat_interleave(n, 0),
                                  max_new_tokens=self.max_response, pad_token_id=pad,
                                  eos_token_id=tok.eos_token_id, top_k=0, **kw)
        return tok.batch_decode(out[:, width:], skip_special_tokens=True)

    def _sample_text(self, prompts: list[list[dict]], n: int, temperature: float, top_p: float) -> list[str]:
        from components.common.generation import SamplingParams, TransformersGenerator

        texts = [self.tokenizer.apply_chat_template(self.messages(p), add_generation_prompt=True, tokenize=False)
                 for p in prompts]
        params = SamplingParams(max_new_tokens=self.max_response, temperature=temperature, top_p=top_p,
                                num_samples=n)
        self.model.eval()
        batch = max(n, TEXT_BATCH)
        groups = TransformersGenerator(self.model, self.tokenizer, batch_size=batch).sample(texts, params)
        return [c.text for g in groups for c in g]

    def save(self, folder: Path) -> None:
        self.model.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        if self.style == "statements":       # the small profile's committed format
            (Path(folder) / "orbit_policy.txt").write_text(str(self.max_response))
        else:
            write_policy_ref(folder, self.max_response, self.style, self.device)


def write_policy_ref(folder: Path, max_response: int, style: str, device: str, source: str = "") -> None:
    """The policy's settings; ``source`` names a checkpoint folder when the weights are not here."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    ref = {"style": style, "max_response": max_response, "device": device, "source": source}
    (Path(folder) / POLICY_FILE).write_text(json.dumps(ref, indent=1))


def load_lm_policy(folder: Path, dtype: str = "auto") -> LMPolicy:
    """The policy of a folder. ``dtype`` applies to a checkpoint policy (``auto``: bf16 on a GPU,
    fp32 on CPU; training asks for fp32 master weights); the small profile's tiny model is fp32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(folder)
    if (folder / POLICY_FILE).is_file():
        return _load_text_policy(folder, dtype)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    return LMPolicy(model, AutoTokenizer.from_pretrained(folder), int((folder / "orbit_policy.txt").read_text()))


def _load_text_policy(folder: Path, dtype: str = "auto") -> LMPolicy:
    """A checkpoint (here or at ``source``) on its device (CUDA + bf16 when visible)."""
    from components.common.hf_models import load_model, load_tokenizer

    ref = json.loads((folder / POLICY_FILE).read_text())
    weights = Path(ref["source"]) if ref.get("source") else folder
    model = load_model(weights, "causal_lm", device=ref["device"], dtype=dtype)
    tok = load_tokenizer(weights, padding_side="left")
    return LMPolicy(model, tok, int(ref["max_response"]), ref["style"], ref["device"])


def rollouts(policy: LMPolicy, prompts: list[list[dict]], k: int, temperature: float, seed: int,
             chunk: int = 32) -> list[list[tuple[list[str], str]]]:
    """k sampled replies per prompt: [[(statement ids, rendered text) x k] per prompt]."""
    torch.manual_seed(seed)
    out = []
    for i in range(0, len(prompts), chunk):
        part = prompts[i:i + chunk]
        texts = policy.sample(part, k, temperature)
        reps = [policy.reply(t) for t in texts]
        out += [reps[j * k:(j + 1) * k] for j in range(len(part))]
    return out
