"""Tokenizers trained here behave like a real checkpoint's: stable special ids, padding, chat
template, save / AutoTokenizer round trip."""
import pytest
from transformers import AutoTokenizer

from components.common.tiny_tokenizer import train_tokenizer
from tests.paper.checkpoints import corpus


@pytest.mark.parametrize("kind", ["word", "bpe"])
def test_trained_tokenizer_round_trips(tmp_path, kind):
    tok = train_tokenizer(corpus(100), kind=kind, vocab_size=200)
    assert (tok.pad_token_id, tok.unk_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2, 3)
    text = "the cat sees the ball ."
    ids = tok(text)["input_ids"]
    assert tok.unk_token_id not in ids
    assert tok.decode(ids).replace(" .", ".") == text.replace(" .", ".")
    batch = tok(["the cat", "a small bird sees the ball"], padding=True)
    assert len(set(map(len, batch["input_ids"]))) == 1 and 0 in batch["attention_mask"][0]
    chat = tok.apply_chat_template([{"role": "user", "content": "the dog"}], tokenize=False,
                                   add_generation_prompt=True)
    assert chat.startswith("<|user|>") and chat.rstrip().endswith("<|assistant|>")
    tok.save_pretrained(str(tmp_path))
    again = AutoTokenizer.from_pretrained(str(tmp_path))
    assert again(text)["input_ids"] == ids and again.chat_template == tok.chat_template


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="'word' or 'bpe'"):
        train_tokenizer(["a b"], kind="unigram")
