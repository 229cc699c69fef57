"""Re-run after v13: the cached object positions give the same questions as the uncached code."""
import numpy as np

from components.tricd import video as V


def _uncached_mean_position(obj, frames, world):
    pts = [V.object_position(obj, t, world) for t in range(frames) if V.visible(obj, t)]
    xs, ys = zip(*pts)
    return sum(xs) / len(xs) + V.OBJ / 2, sum(ys) / len(ys) + V.OBJ / 2


def test_cached_mean_position_equals_the_direct_mean_for_every_motion_and_event():
    rng = np.random.default_rng(0)
    objects = [o for _ in range(60) for o in V.sample_scene(rng, frames=8, world=24)["objects"]]
    assert {o["event"] for o in objects} >= {"none", "appears", "disappears"}
    for obj in objects:
        assert V.mean_position(obj, 8, 24) == _uncached_mean_position(obj, 8, 24)


def test_an_edited_object_gets_its_new_position_not_a_stale_cached_one():
    obj = V.sample_scene(np.random.default_rng(1), frames=8, world=24)["objects"][0]
    before = V.mean_position(obj, 8, 24)
    obj = {**obj, "x0": obj["x0"] + 3}
    assert V.mean_position(obj, 8, 24) == _uncached_mean_position(obj, 8, 24) != before
