"""Dev data for the VAE calibration: training-world rollouts and validation-world probe spins
(the test worlds are never generated). Rollout seed 100 (dev), not the run's seed 0."""
import time, numpy as np
from components.persist.config import PersistConfig
from components.persist.data import env_spec, rollout_set, probe_set, spin_steps
from components.persist.world import generate_world
cfg = PersistConfig.for_profile("small"); w, r = cfg.world, cfg.rollout
spec = env_spec(w); hw = (w.frame, w.frame); t0 = time.time()
train_w = np.stack([generate_world(spec, w.world_seed + i, w.n_trees, w.n_pillars, w.water) for i in range(w.n_train_worlds)])
off = w.n_train_worlds + w.n_eval_worlds   # validation worlds follow the test worlds
val_w = np.stack([generate_world(spec, w.world_seed + off + i, w.n_trees, w.n_pillars, w.water) for i in range(w.n_val_worlds)])
rng = np.random.default_rng(100)
kinds, probs = zip(*r.policy_mix.items())
plan = [(wi, str(rng.choice(kinds, p=np.array(probs))), r.steps) for wi in range(len(train_w)) for _ in range(r.episodes_per_world)]
train = rollout_set(train_w, spec, plan, hw, rng, spin=spin_steps(w))
print("train", time.time() - t0, flush=True)
val = probe_set(val_w, spec, r.val_probe_episodes, spin_steps(w), hw, rng, r)
print("val", time.time() - t0, flush=True)
np.savez_compressed("/tmp/persist_cal/dev.npz", crops=train["crops"], val_crops=val["crops"],
                    val_probe_cells=val["probe_cells"], val_origins=val["origins"], val_colour=val["probe_colour"])
