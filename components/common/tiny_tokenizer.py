"""Tokenizers for tiny models, trained here with ``tokenizers`` and wrapped as
``PreTrainedTokenizerFast``, so a tiny model and a real checkpoint are driven through the same
calls (``tok(texts, padding=True)``, ``apply_chat_template``, ``save_pretrained`` /
``AutoTokenizer.from_pretrained(folder)``).

Special tokens come first, in a fixed order, so their ids are stable (pad 0, unk 1, bos 2,
eos 3); ``components.common.tiny_models`` configs use the same ids.
"""
from __future__ import annotations

from typing import Iterable

SPECIALS = ("<pad>", "<unk>", "<s>", "</s>")
# A minimal chat format (role tags, one turn per line) so methods that call
# apply_chat_template work on tiny models exactly as on instruction-tuned ones.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} </s> "
    "{% endfor %}{% if add_generation_prompt %}<|assistant|> {% endif %}"
)
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")


def train_tokenizer(texts: Iterable[str], kind: str = "bpe", vocab_size: int = 512,
                    min_frequency: int = 1, chat: bool = True):
    """Train a word-level (split on whitespace and punctuation) or byte-level BPE tokenizer on
    ``texts``; returns a ``PreTrainedTokenizerFast`` with pad/unk/bos/eos set."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(SPECIALS) + (list(ROLE_TOKENS) if chat else [])
    if kind == "word":
        tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            special_tokens=specials)
    elif kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                      special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    else:
        raise ValueError(f"tokenizer kind must be 'word' or 'bpe', got {kind!r}")
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                   bos_token="<s>", eos_token="</s>")
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    return fast
