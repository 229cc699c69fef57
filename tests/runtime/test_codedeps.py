"""Code deps: a stage depends on the components/ files it imports, transitively."""
from __future__ import annotations

from flows.runtime import pipeline, registry
from flows.runtime.codedeps import component_files


def _tree(root, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_imports_are_followed_transitively_relative_and_inside_functions(tmp_path):
    _tree(tmp_path, {
        "components/__init__.py": "",
        "components/common/__init__.py": "",
        "components/common/io.py": "import json\n",
        "components/common/rl.py": "from components.common import io\n",
        "components/common/unused.py": "",
        "components/m/__init__.py": "",
        "components/m/train.py": "from .model import Net\n\ndef stage(cfg, ctx):\n"
                                 "    from components.common.rl import step\n",
        "components/m/model.py": "import torch\nclass Net: ...\n",
    })
    files = component_files.__wrapped__("components.m.train", tmp_path)
    assert files == ("components/__init__.py", "components/common/__init__.py", "components/common/io.py",
                     "components/common/rl.py", "components/m/__init__.py", "components/m/model.py",
                     "components/m/train.py")


def test_linrnn_stages_depend_only_on_what_they_import():
    method = registry.get("linrnn")
    exact = method.stage_code_paths(method.stage("verify_exact"), by_imports=True)
    train = method.stage_code_paths(method.stage("train_ringworld"), by_imports=True)
    assert "components/common/rl.py" in train and "components/common/rl.py" not in exact
    assert "components/linrnn/ppo.py" not in exact and "flows/linrnn.py" in exact
    spec = pipeline.stage_spec(method, method.stage("verify_exact"), code_deps="imports")
    assert "../../components/linrnn/filters.py" in spec["deps"]
    assert "../../components/common" not in spec["deps"]     # not the whole folder any more


def test_folders_stay_the_default_until_the_project_switches(tmp_path):
    from flows.runtime.project import Project

    method = registry.get("linrnn")
    assert "../../components/common" in pipeline.stage_spec(method, method.stage("verify_exact"))["deps"]
    (tmp_path / "params.yaml").write_text("code_deps: imports\n")
    (tmp_path / "data" / "linrnn").mkdir(parents=True)
    pipeline.write_pipeline(Project(tmp_path), method)
    text = (tmp_path / "data" / "linrnn" / "dvc.yaml").read_text()
    assert "../../components/linrnn/filters.py" in text and "../../components/common\n" not in text
