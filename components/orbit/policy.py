"""The small policy: a word-level decoder that reads the dialogue and answers in statements.

Input tokens are the words of the truncated dialogue; output tokens are whole statements (one
token per entry of ``ontology.PHRASES``) and EOS, so a reply is at most ``max_response``
statements. The decoder is the shared nanoGPT-style ``components.common.transformer.Decoder``.
The "base model" is this decoder trained from scratch on mediocre, case-independent replies
(mostly filler, some generic advice, and a sprinkle of every other statement), so it scores
low and RL has room to improve it.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from components.common.transformer import MLP, Decoder, DecoderShape
from components.orbit.ontology import FILLERS, PHRASE_IDS, PHRASES, user_text

SPECIALS = ("<pad>", "<bos>", "<sep>", "<eos>", "<unk>")
PAD, BOS, SEP, EOS, UNK = range(len(SPECIALS))
GENERIC_DECENT = ("empathy", "self_care", "see_clinician", "safety_net")


class Vocab:
    def __init__(self, words: list[str]):
        self.itos = list(SPECIALS) + [f"<s:{p}>" for p in PHRASE_IDS] + sorted(set(words))
        self.stoi = {t: i for i, t in enumerate(self.itos)}
        self.first_phrase = len(SPECIALS)
        # tokens a reply may contain: the statements and EOS
        self.response_ids = torch.tensor([EOS] + list(range(self.first_phrase,
                                                             self.first_phrase + len(PHRASE_IDS))))

    def __len__(self) -> int:
        return len(self.itos)

    def phrase_token(self, pid: str) -> int:
        return self.stoi[f"<s:{pid}>"]

    def encode_prompt(self, prompt: list[dict], length: int) -> list[int]:
        """Left-padded: PAD... BOS w1 ... wn SEP (the most recent words kept if too long).
        The policy reads the user turns (the assistant turn of our dialogues is constant)."""
        ids = [self.stoi.get(w, UNK) for w in user_text(prompt).split()]
        ids = [BOS] + ids[-(length - 2):] + [SEP]
        return [PAD] * (length - len(ids)) + ids

    def decode_response(self, ids: list[int]) -> list[str]:
        out = []
        for i in ids:
            if i == EOS:
                break
            if self.first_phrase <= i < self.first_phrase + len(PHRASE_IDS):
                out.append(PHRASE_IDS[i - self.first_phrase])
        return out


def vocab_words(prompts: list[list[dict]]) -> list[str]:
    return sorted({w for p in prompts for w in user_text(p).split()})


class Policy(torch.nn.Module):
    """Decoder + the masks that keep replies inside the statement vocabulary."""

    def __init__(self, vocab: Vocab, d_model: int, n_layers: int, n_heads: int, prompt_len: int,
                 max_response: int):
        super().__init__()
        self.vocab, self.prompt_len, self.max_response = vocab, prompt_len, max_response
        shape = DecoderShape(vocab_size=len(vocab), d_model=d_model, n_layers=n_layers, n_heads=n_heads,
                             context=prompt_len + max_response)
        self.net = Decoder(shape, lambda i: MLP(d_model, 4 * d_model))
        mask = torch.full((len(vocab),), float("-inf"))
        mask[vocab.response_ids] = 0.0
        self.register_buffer("response_mask", mask)
        self.hparams = {"d_model": d_model, "n_layers": n_layers, "n_heads": n_heads,
                        "prompt_len": prompt_len, "max_response": max_response}

    def response_logits(self, seq: torch.Tensor) -> torch.Tensor:
        return self.net(seq) + self.response_mask

    def encode(self, prompts: list[list[dict]]) -> torch.Tensor:
        return torch.tensor([self.vocab.encode_prompt(p, self.prompt_len) for p in prompts])

    def _step(self, x: torch.Tensor, caches: list | None, pos0: int) -> tuple[torch.Tensor, list]:
        """Decoder forward over new tokens ``x`` (B, t) reusing per-layer key/value caches
        (the shared Decoder has no cache; this re-uses its modules, a test checks equality)."""
        net = self.net
        h = net.tok_emb(x) + net.pos_emb(torch.arange(pos0, pos0 + x.shape[1]))
        new_caches = []
        for i, block in enumerate(net.blocks):
            a = block.attn
            b, t, d = h.shape
            q, k, v = a.qkv(block.ln_attn(h)).split(d, dim=-1)
            q, k, v = (z.view(b, t, a.n_heads, d // a.n_heads).transpose(1, 2) for z in (q, k, v))
            mask = None
            if caches is not None:
                k, v = torch.cat([caches[i][0], k], 2), torch.cat([caches[i][1], v], 2)
                if t > 1:  # new token j sees every cached key and the new keys up to itself
                    past = k.shape[2] - t
                    mask = torch.arange(k.shape[2])[None, :] <= past + torch.arange(t)[:, None]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=caches is None)
            h = h + a.proj(y.transpose(1, 2).reshape(b, t, d))
            h = h + block.ffn(block.ln_ffn(h))
            new_caches.append((k, v))
        return net.head(net.ln_out(h)) + self.response_mask, new_caches

    @torch.no_grad()
    def sample(self, prompt_ids: torch.Tensor, temperature: float = 1.0,
               generator: torch.Generator | None = None, n: int = 1) -> torch.Tensor:
        """(B, P) prompt ids -> (B * n, R) response ids (n replies per prompt, consecutive);
        after EOS the reply is padded with EOS. temperature 0 = greedy."""
        logits, caches = self._step(prompt_ids, None, 0)
        if n > 1:
            caches = [(k.repeat_interleave(n, 0), v.repeat_interleave(n, 0)) for k, v in caches]
        logits = logits[:, -1].repeat_interleave(n, 0)
        done = torch.zeros(len(logits), dtype=torch.bool)
        out = []
        pos = prompt_ids.shape[1]
        for step in range(self.max_response):
            if temperature <= 0:
                nxt = logits.argmax(-1)
            else:
                probs = F.softmax(logits / temperature, -1)
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
            nxt = torch.where(done, torch.full_like(nxt, EOS), nxt)
            out.append(nxt)
            done |= nxt == EOS
            if bool(done.all()) or step == self.max_response - 1:
                break
            step_logits, caches = self._step(nxt[:, None], caches, pos)
            logits, pos = step_logits[:, -1], pos + 1
        resp = torch.stack(out, 1)
        if resp.shape[1] < self.max_response:
            resp = torch.cat([resp, torch.full((len(resp), self.max_response - resp.shape[1]), EOS)], 1)
        return resp

    def group_logprobs(self, prompt_ids: torch.Tensor, response_ids: torch.Tensor, n: int) -> torch.Tensor:
        """``token_logprobs`` for n consecutive replies per prompt, running each prompt once."""
        logits_p, caches = self._step(prompt_ids, None, 0)
        caches = [(k.repeat_interleave(n, 0), v.repeat_interleave(n, 0)) for k, v in caches]
        first = logits_p[:, -1:].repeat_interleave(n, 0)
        rest, _ = self._step(response_ids[:, :-1], caches, prompt_ids.shape[1])
        logits = torch.cat([first, rest], 1)
        return torch.gather(F.log_softmax(logits, -1), 2, response_ids[..., None]).squeeze(-1)

    def token_logprobs(self, prompt_ids: torch.Tensor, response_ids: torch.Tensor) -> torch.Tensor:
        """log pi(y_t | x, y_<t) for every response position: (B, R)."""
        seq = torch.cat([prompt_ids, response_ids], 1)[:, :-1]
        logits = self.response_logits(seq)[:, prompt_ids.shape[1] - 1:]
        return torch.gather(F.log_softmax(logits, -1), 2, response_ids[..., None]).squeeze(-1)


def response_mask(response_ids: torch.Tensor) -> torch.Tensor:
    """1 for tokens up to and including the first EOS (what the policy actually generated)."""
    is_eos = (response_ids == EOS).int()
    before = torch.cumsum(is_eos, 1) - is_eos   # number of EOS strictly before position t
    return (before == 0).float()


def mediocre_reply(rng: np.random.Generator, min_len: int, max_len: int, p_filler: float,
                   p_generic: float) -> list[str]:
    """A case-independent reply: mostly filler, some generic advice, occasionally anything."""
    n = int(rng.integers(min_len, max_len + 1))
    out: list[str] = []
    while len(out) < n:
        u = rng.random()
        if u < p_filler:
            pid = FILLERS[rng.integers(len(FILLERS))]
        elif u < p_filler + p_generic:
            pid = GENERIC_DECENT[rng.integers(len(GENERIC_DECENT))]
        else:
            pid = PHRASE_IDS[rng.integers(len(PHRASE_IDS))]
        if pid not in out:
            out.append(pid)
    return out


def build_policy(vocab: Vocab, hp: dict) -> Policy:
    return Policy(vocab, hp["d_model"], hp["n_layers"], hp["n_heads"], hp["prompt_len"], hp["max_response"])


def policy_state(policy: Policy) -> dict:
    return {"state_dict": policy.state_dict(), "itos": policy.vocab.itos, "hparams": policy.hparams}


def load_policy(state: dict) -> Policy:
    words = [t for t in state["itos"] if not t.startswith("<")]
    policy = build_policy(Vocab(words), state["hparams"])
    assert policy.vocab.itos == state["itos"], "vocabulary mismatch"
    policy.load_state_dict(state["state_dict"])
    return policy.eval()


def response_texts(policy: Policy, response_ids: torch.Tensor) -> list[tuple[list[str], str]]:
    out = []
    for row in response_ids.tolist():
        ids = policy.vocab.decode_response(row)
        out.append((ids, " ".join(PHRASES[p] for p in ids)))
    return out


__all__ = ["Policy", "Vocab", "build_policy", "load_policy", "mediocre_reply", "policy_state",
           "response_mask", "response_texts", "vocab_words"]
