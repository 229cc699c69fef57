"""The VAE regression test's setting with the old conv VAE: must fall below the test's 0.9."""
import numpy as np, torch
import tests.persist.test_persist_science as T
from components.common.seeds import seed_everything
from components.common.train import fit
from components.persist.models import VAE3D, class_weights
from components.persist.train import voxel_accuracy
from components.persist import world as W
torch.set_num_threads(1)
seed_everything(0)
rng = np.random.default_rng(0)
train, held = T._landmark_crops(512, rng), T._landmark_crops(64, rng)
vae = VAE3D(16, 16, arch="conv")
w = class_weights(train.numpy(), 0.5); gen = torch.Generator().manual_seed(0)
from components.persist.train import augment_crops
b = (augment_crops(train[torch.randint(len(train), (16,), generator=gen)], rng, 4) for _ in iter(int, 1))
fit(vae, b, lambda m, x: m.loss(x, class_weight=w), steps=800, lr=2e-3, warmup=40)
print("conv landmark acc", voxel_accuracy(vae.eval(), held, classes=W.LANDMARKS), "all", voxel_accuracy(vae, held))
