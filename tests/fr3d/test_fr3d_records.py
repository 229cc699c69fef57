"""gen_scenes' records (dicts of numpy arrays, some empty) load back under weights_only=True."""
import numpy as np

from components.common.context import LocalContext
from components.common.io import load_torch
from components.fr3d.config import Fr3dConfig
from components.fr3d.data import PRETRAIN, gen_scenes_stage, is_pretrain, make_split, pretrain_shard


def test_scene_records_round_trip(tmp_path):
    # a split without traffic guarantees empty car arrays, whatever the data seed
    cfg = Fr3dConfig.for_profile("smoke", {"scenes": {"test": {"cars_per_100m": 0.0}}})
    sc = cfg.scenes
    gen_scenes_stage(cfg, LocalContext(out_dir=tmp_path))
    n_empty = 0
    for i, split in enumerate(sc.splits):
        if is_pretrain(split) and pretrain_shard(sc, split)[0]:
            continue            # v6: one scene set for every pre-training shard, "pretrain.pt"
        expected = make_split(sc, split, np.random.default_rng([sc.data_seed, i]))
        back = load_torch(tmp_path / f"{PRETRAIN if is_pretrain(split) else split}.pt")
        assert len(back) == len(expected)
        for got, want in zip(back, expected):
            assert {k: v for k, v in got.items() if k != "scene"} == \
                {k: v for k, v in want.items() if k != "scene"}
            assert got["scene"].keys() == want["scene"].keys()
            for key, array in want["scene"].items():
                assert got["scene"][key].dtype == array.dtype and np.array_equal(got["scene"][key], array)
                n_empty += array.size == 0
    assert n_empty > 0      # scenes without cars: empty arrays (numpy pickles them via bytes())


def test_shared_npz_round_trip(tmp_path):
    from components.common.io import load_npz, save_npz

    arrays = {"rgb": np.arange(24, dtype=np.uint8).reshape(2, 3, 4), "empty": np.zeros((0, 3)),
              "mask": np.array([True, False])}
    save_npz(tmp_path / "a" / "x.npz", **arrays)
    back = load_npz(tmp_path / "a" / "x.npz")
    assert back.keys() == arrays.keys()
    assert all(back[k].dtype == v.dtype and np.array_equal(back[k], v) for k, v in arrays.items())


def test_shared_cross_block_masks_padding_and_can_drop_its_feed_forward():
    import torch

    from components.common.transformer import CrossBlock

    torch.manual_seed(0)
    block = CrossBlock(16, 4)
    q, kv = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[:, 3:] = True
    changed = kv.clone()
    changed[:, 3:] = torch.randn(2, 2, 16)     # only padded keys differ
    assert torch.allclose(block(q, kv, pad), block(q, changed, pad), atol=1e-6)
    assert not torch.allclose(block(q, kv), block(q, changed))
    light = CrossBlock(16, 4, feed_forward=False)
    assert light.ff is None and light.ln_ff is None and light(q, kv).shape == q.shape
