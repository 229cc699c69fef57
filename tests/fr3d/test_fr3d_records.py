"""gen_scenes' records (dicts of numpy arrays, some empty) load back under weights_only=True."""
import numpy as np

from components.common.context import LocalContext
from components.common.io import load_torch
from components.fr3d.config import Fr3dConfig
from components.fr3d.data import gen_scenes_stage, make_split


def test_scene_records_round_trip(tmp_path):
    sc = Fr3dConfig.for_profile("smoke").scenes
    gen_scenes_stage(Fr3dConfig.for_profile("smoke"), LocalContext(out_dir=tmp_path))
    n_empty = 0
    for i, split in enumerate(sc.splits):
        expected = make_split(sc, split, np.random.default_rng([sc.data_seed, i]))
        back = load_torch(tmp_path / f"{split}.pt")
        assert len(back) == len(expected)
        for got, want in zip(back, expected):
            assert {k: v for k, v in got.items() if k != "scene"} == \
                {k: v for k, v in want.items() if k != "scene"}
            assert got["scene"].keys() == want["scene"].keys()
            for key, array in want["scene"].items():
                assert got["scene"][key].dtype == array.dtype and np.array_equal(got["scene"][key], array)
                n_empty += array.size == 0
    assert n_empty > 0      # scenes without cars: empty arrays (numpy pickles them via bytes())
