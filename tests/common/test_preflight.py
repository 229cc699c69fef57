"""Preflight errors: one line naming the key, the value and the expected layout."""
import pytest

from components.common.preflight import (PreflightError, require_checkpoint, require_dir, require_file,
                                         require_tokenizer)


def test_messages_name_key_and_layout(tmp_path, tiny_checkpoints):
    cases = [(lambda: require_file("paper.eval_jsonl", "", "a JSONL file"), "paper.eval_jsonl = '' is not set"),
             (lambda: require_dir("paper.root", str(tmp_path / "x"), "a folder of shards"), "is not a folder"),
             (lambda: require_dir("paper.root", str(tmp_path), "C4 shards", ("**/c4-train.*",)), "c4-train"),
             (lambda: require_checkpoint("paper.model_path", str(tmp_path)), "missing config.json"),
             (lambda: require_tokenizer("paper.tok", str(tmp_path)), "tokenizer.json")]
    for call, expected in cases:
        with pytest.raises(PreflightError) as err:
            call()
        message = str(err.value)
        assert expected in message and "\n" not in message and "set paper." in message
        assert isinstance(err.value, FileNotFoundError)          # older callers catch this
    assert require_checkpoint("paper.model_path", str(tiny_checkpoints.checkpoint("llama")))
