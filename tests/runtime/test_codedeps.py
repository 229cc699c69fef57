"""Code deps: a stage depends on the components/ files it imports, transitively."""
from __future__ import annotations

from flows.runtime import pipeline, registry
from flows.runtime.codedeps import component_files
from flows.runtime.testing import REPO_ROOT


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


def test_imports_are_the_default_and_a_project_may_switch_back_to_folders(tmp_path):
    from flows.runtime.project import Project

    method = registry.get("linrnn")
    assert "../../components/common" not in pipeline.stage_spec(method, method.stage("verify_exact"))["deps"]
    (tmp_path / "params.yaml").write_text("code_deps: folders\n")
    (tmp_path / "data" / "linrnn").mkdir(parents=True)
    pipeline.write_pipeline(Project(tmp_path), method)
    text = (tmp_path / "data" / "linrnn" / "dvc.yaml").read_text()
    assert "../../components/common\n" in text and "../../components/linrnn/filters.py" not in text


def test_the_committed_pipelines_use_import_deps():
    """The repository's own dvc.yaml files are generated with the default (``repro gen``)."""
    text = (REPO_ROOT / "data" / "linrnn" / "dvc.yaml").read_text()
    assert "../../components/linrnn/filters.py" in text and "- ../../components/common\n" not in text


def test_editing_one_common_module_stales_only_the_stages_that_import_it(tmp_path):
    """linrnn's exact filter check imports no RL code: an edit to components/common/rl.py
    leaves it up to date, an edit to its own filters.py stales it, and status names the file.
    (The stage runs in-process and is committed to DVC as ``repro exec`` + a run would.)"""
    from flows.runtime import execute, runner
    from flows.runtime.dvc_bridge import DvcBridge
    from flows.runtime.testing import make_project

    project = make_project(tmp_path / "proj", ["linrnn"])
    method = registry.get("linrnn")
    runner.prepare(project, method, "smoke", pipeline.build_config(method, "smoke"))
    execute.run_stage(project, "linrnn", "verify_exact")
    addr = f"{project.pipeline_file('linrnn')}:verify_exact"
    bridge = DvcBridge(project.root)
    try:
        bridge.commit(addr)
        assert bridge.status(addr).up_to_date
        with open(project.root / "components/common/rl.py", "a") as f:
            f.write("\n# an edit to code verify_exact does not import\n")
        assert bridge.status(addr).up_to_date
        with open(project.root / "components/linrnn/filters.py", "a") as f:
            f.write("\n# an edit to code it does import\n")
        assert "code: components/linrnn/filters.py modified" in bridge.status(addr).reasons
    finally:
        bridge.close()
