"""domed's paper profile end to end through the runtime (DVC + Prefect + MLflow) on a tiny
ResNet built from ResNetConfig and a generated 3-domain x 3-class PNG tree in DomainBed's
layout, steps and image size shrunk by --set."""
import math

import pytest

from components.common.io import load_torch, read_json
from components.domed.train import ENSEMBLE, PREDICTIONS, SELECTED, TEACHERS
from tests.paper.harness import run_paper_shape
from tests.paper.layouts import write_image_folder

pytestmark = [pytest.mark.paper_shape, pytest.mark.slow]

DOMAINS, CLASSES = ["art_painting", "cartoon", "photo"], ["dog", "guitar", "house"]
METHODS = ("erm", "erm_ts", "ensemble", "eoa", "diwa", "domed", "domed_beta0", "end2_only", "kd_seen")
SHRINK = ["seeds=[0]", "data.benchmarks=[PACS]", "data.image_size=32", "data.loader_threads=2",
          "model.device=cpu", "model.predict_batch=16", "optim.batch_size=4", "optim.teacher_steps=2",
          "optim.steps=3", "optim.eval_every=1", "baselines.n_ensemble=2", "baselines.eoa_start=2",
          "student.search_temperatures=[1.0,2.0]", "student.search_betas=[0.05,0.1]"]


def test_domed_paper_profile_on_tiny_resnet_and_domainbed_layout(tmp_path, tiny_checkpoints):
    root = tmp_path / "domainbed"
    write_image_folder(root / "PACS", CLASSES, per_class=4, domains=DOMAINS, size=40)
    backbone = tiny_checkpoints.checkpoint("resnet")
    result = run_paper_shape("domed", tmp_path / "project",
                             SHRINK + [f"data.domainbed_root={root}", f"model.backbone_path={backbone}"])

    built = result.metrics("domed", "build_domains")
    assert built["PACS/n_images"] == 36 and built["PACS/n_domains"] == 3 and built["PACS/n_classes"] == 3
    assert built["PACS/folds"] == 3                       # test_envs [0..5] -> the 3 domains there are
    teachers = load_torch(result.out("domed", "train_teachers", "PACS-0") / TEACHERS)
    assert sorted(teachers) == [0, 1, 2]
    for test_env, fold in teachers.items():             # one ResNet teacher per source domain
        assert fold["teachers"] == [[d] for d in range(3) if d != test_env]
        assert any(k.startswith("backbone.") for k in fold["states"][0])
    pred = load_torch(result.out("domed", "teacher_predict", "PACS-0") / PREDICTIONS)[1]
    assert pred["unseen"]["logits"].shape[1:] == (2, 3)
    for d, row in zip(pred["domain"].tolist(), pred["unseen"]["mask"].tolist()):
        assert row == [d not in tau for tau in pred["unseen"]["teachers"]]

    ensemble = load_torch(result.out("domed", "train_erm", "PACS-0") / ENSEMBLE)[0]
    assert len(ensemble["eoa_states"]) == 2 and set(ensemble["diwa_state"]) == set(ensemble["states"][0])
    selected = read_json(result.out("domed", "train_student", "PACS-0") / SELECTED)
    assert len(selected["domed"]) == 3 and all(c["beta"] in (0.05, 0.1) for c in selected["domed"])
    assert all(c["beta"] == 0.0 for c in selected["domed_beta0"])

    aggregate = result.metrics("domed", "aggregate")
    assert aggregate["PACS/folds"] == 3
    for method in METHODS:
        for name in ("acc", "nll", "ece"):
            assert math.isfinite(aggregate[f"PACS/{method}/{name}"]), (method, name)
        # PRR and AUROC are undefined (NaN) for a random tiny model that is all right or all
        # wrong on a fold's 12 test images; here they only have to be reported
        assert {f"PACS/{method}/prr", f"PACS/{method}/auroc"} <= set(aggregate)
    assert {f"PACS/{c}_pass" for c in ("P1", "P2", "D1", "D2", "D3", "D4")} <= set(aggregate)
