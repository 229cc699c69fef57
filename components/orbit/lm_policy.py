"""The policy: a transformers causal LM (a tiny ``Qwen3ForCausalLM`` in the small profile,
Qwen3-4B-Instruct in the paper's) driven through its tokenizer's chat template.

Small profile: the tokenizer is word-level (``components.common.tiny_tokenizer``) over the
synthetic world's dialogue words plus one token per statement of ``ontology.PHRASES``
(``s_<id>``), so a reply is a short run of statement tokens. The judge reads the statement tokens
of the decoded text and ignores any other word. The same ``sample`` / ``rollouts`` calls drive
a real checkpoint; only the tokenizer and the model folder differ.
"""
from __future__ import annotations

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


class LMPolicy:
    """A causal LM + tokenizer that answers consultation prompts with at most ``max_response``
    new tokens."""

    def __init__(self, model, tokenizer, max_response: int):
        self.model, self.tokenizer, self.max_response = model, tokenizer, max_response

    def prompt_ids(self, prompt: list[dict]) -> list[int]:
        out = self.tokenizer.apply_chat_template(chat_prompt(prompt), add_generation_prompt=True, tokenize=True)
        return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)

    def reply_ids(self, statements: list[str]) -> list[int]:
        vocab = self.tokenizer.get_vocab()
        return [vocab[statement_token(p)] for p in statements] + [self.tokenizer.eos_token_id]

    @torch.no_grad()
    def sample(self, prompts: list[list[dict]], n: int, temperature: float, top_p: float = 1.0
               ) -> list[str]:
        """n decoded replies per prompt (consecutive); temperature 0 = greedy. Uses torch's
        global generator (seed it first for reproducible replies)."""
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

    def save(self, folder: Path) -> None:
        self.model.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        (Path(folder) / "orbit_policy.txt").write_text(str(self.max_response))


def load_lm_policy(folder: Path) -> LMPolicy:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(folder)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    return LMPolicy(model, AutoTokenizer.from_pretrained(folder), int((folder / "orbit_policy.txt").read_text()))


def rollouts(policy: LMPolicy, prompts: list[list[dict]], k: int, temperature: float, seed: int,
             chunk: int = 32) -> list[list[tuple[list[str], str]]]:
    """k sampled replies per prompt: [[(statement ids, rendered text) x k] per prompt]."""
    torch.manual_seed(seed)
    out = []
    for i in range(0, len(prompts), chunk):
        part = prompts[i:i + chunk]
        texts = policy.sample(part, k, temperature)
        reps = [(statements_of(t), render(statements_of(t))) for t in texts]
        out += [reps[j * k:(j + 1) * k] for j in range(len(part))]
    return out
