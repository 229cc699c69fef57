"""Test helper: a save_pretrained folder whose modelling code ships inside it (config auto_map),
as nvidia/MM-Embed's does; loading it needs ``trust_remote_code``."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def save_custom_code_model(folder: Path, code: str, module_name: str, config_class: str, model_class: str,
                           tokenizer=None) -> Path:
    """Write ``code`` as ``module_name.py``, build ``model_class(config_class())`` from it,
    register both for the Auto classes and save them (the module file is copied into ``folder``)."""
    from components.common.hf_models import save_model

    src = Path(folder).parent / f"{module_name}-src"
    src.mkdir(parents=True, exist_ok=True)
    (src / f"{module_name}.py").write_text(code)
    spec = importlib.util.spec_from_file_location(module_name, src / f"{module_name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module     # save_pretrained finds the file through the module
    try:
        spec.loader.exec_module(module)
        config_cls, model_cls = getattr(module, config_class), getattr(module, model_class)
        config_cls.register_for_auto_class()
        model_cls.register_for_auto_class("AutoModel")
        return save_model(model_cls(config_cls()), folder, tokenizer)
    finally:
        del sys.modules[module_name]
