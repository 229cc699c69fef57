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
    _run("passive_baselines", cfg, root / "passive",
         {"build_env": root / "env", "pretrain_perception": root / "perception"})
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


def test_each_passive_head_is_trained_on_its_own_frames(upstream):
    """A passive head sees exactly its sampler's frames: its accuracy on the fixed-frame inputs
    it was trained on is what evaluate reports, and heads differ between samplers."""
    from components.anompi.env import PASSIVE_SAMPLERS
    from components.anompi.passive import head_frame_counts, load_passive_heads

    cfg, root = upstream
    heads, _ = load_passive_heads(root / "passive")
    counts = head_frame_counts(cfg)
    assert set(heads) == {f"{kind}_{k}" for kind in PASSIVE_SAMPLERS for k in counts}
    assert counts[0] == cfg.policy.n_anchors and cfg.policy.budget in counts
    u, p = heads[f"uniform_{counts[0]}"], heads[f"pairs_{counts[0]}"]
    assert any(not torch.equal(u[key], p[key]) for key in u)


def test_splits_have_their_own_seeds():
    from components.anompi.config import AnompiConfig
    from components.anompi.data import split_specs

    env = AnompiConfig.for_profile("smoke").env
    a = split_specs(env)
    b = split_specs(env.model_copy(update={"test_seed": env.test_seed + 1}))
    for key in a["train"]:
        assert np.array_equal(a["train"][key], b["train"][key])
        assert np.array_equal(a["val"][key], b["val"][key])
    assert not np.array_equal(a["test"]["seed"], b["test"]["seed"])
    ids = np.concatenate([a[s]["video_id"] for s in ("train", "val", "test")])
    assert len(np.unique(ids)) == len(ids)


def test_evaluate_and_report_on_tiny_runs(upstream):
    """evaluate (passive heads, actions) and report (criteria, cross-seed agreement) end to end."""
    from components.common.io import read_json

    cfg, root = upstream
    _policy_stages(cfg, root, root / "env", "report")
    base = {"build_env": root / "env", "pretrain_perception": root / "perception",
            "passive_baselines": root / "passive", "sft_policy": {"0": root / "report" / "sft"},
            "train_idpo": {"full-0": root / "report" / "idpo"}}
    ctx = _run("evaluate", cfg, root / "report" / "eval", base, {"seed": 0})
    assert 0.0 <= ctx.summary["acc_passive_uniform_eq"] <= 1.0
    assert ctx.summary["same_actions_as_script_sft"] >= 0.0
    _run("report", cfg, root / "report" / "out", {"evaluate": {"0": root / "report" / "eval"}})
    crit = read_json(root / "report" / "out" / "criteria.json")
    assert crit["cross_seed_same_actions_idpo_full"] == 1.0 and "uniform_ratio_to_bound_eq" in crit
