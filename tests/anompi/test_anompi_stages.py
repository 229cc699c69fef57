"""Stage-level invariants: weak supervision (event windows never reach a policy or a loss)."""
import numpy as np
import pytest
import torch

from components.common.context import LocalContext
from components.common.io import read_table, write_table
from flows.anompi import METHOD
from flows.runtime.dag import DeclaredParams

torch.set_num_threads(1)

TINY = {"env": {"n_frames": 48, "n_train": 40, "n_test": 12, "actor_len": [14, 18]},
        "perception": {"steps": 8, "batch_videos": 8},
        "policy": {"n_anchors": 4, "max_steps": 2, "budget": 12},
        "sft": {"steps": 5}, "rollout": {"n_videos": 16, "per_video": 3},
        "idpo": {"rounds": 2, "epochs": 1, "variants": ["full"]}, "seeds": [0]}


def _run(stage_name, cfg, out, inputs, item=None):
    stage = METHOD.stage(stage_name)
    ctx = LocalContext(out_dir=out, inputs=inputs, item=item or {})
    stage.load()(DeclaredParams(cfg, stage.params, stage.name), ctx)
    return ctx


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    root = tmp_path_factory.mktemp("anompi")
    cfg = METHOD.config_class().for_profile("smoke", TINY)
    _run("build_env", cfg, root / "env", {})
    _run("pretrain_perception", cfg, root / "perception", {"build_env": root / "env"})
    return cfg, root


def _policy_stages(cfg, root, env_dir, tag):
    base = {"build_env": env_dir, "pretrain_perception": root / "perception"}
    _run("sft_policy", cfg, root / tag / "sft", base, {"seed": 0})
    base["sft_policy"] = {"0": root / tag / "sft"}
    _run("rollout", cfg, root / tag / "rollout", base, {"seed": 0})
    base["rollout"] = {"0": root / tag / "rollout"}
    _run("build_preferences", cfg, root / tag / "prefs", base, {"variant": "full", "seed": 0})
    base["build_preferences"] = {"full-0": root / tag / "prefs"}
    _run("train_idpo", cfg, root / tag / "idpo", base, {"variant": "full", "seed": 0})
    return {name: torch.load(root / tag / name / "policy.pt") for name in ("sft", "idpo")}, \
        read_table(root / tag / "rollout" / "trajectories.parquet").to_pandas()


def test_policies_never_read_event_windows(upstream):
    """Scrambling the event windows (and the actor windows) in the spec tables changes nothing
    that the warm start, the rollouts, the preferences or iDPO produce."""
    cfg, root = upstream
    clean, traj = _policy_stages(cfg, root, root / "env", "clean")
    scrambled_env = root / "env_scrambled"
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        table = read_table(root / "env" / f"{split}.parquet").to_pandas()
        for col in ("event_start", "event_len", "actor_start", "actor_len", "has_actor"):
            table[col] = rng.permutation(table[col].to_numpy())
        write_table(scrambled_env / f"{split}.parquet", table)
    scrambled, traj2 = _policy_stages(cfg, root, scrambled_env, "scrambled")
    assert traj.equals(traj2)
    for name in clean:
        for key in clean[name]:
            assert torch.equal(clean[name][key], scrambled[name][key]), (name, key)


def test_labels_are_the_only_supervision():
    from components.anompi.data import labels_only

    specs = {"label": np.array([1, 2]), "event_start": np.array([5, 9])}
    out = labels_only(specs)
    assert out.tolist() == [1, 2] and out is not specs["label"]
