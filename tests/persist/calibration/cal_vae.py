"""VAE calibration on dev data: train one variant with the stage's loop (components.common.train.fit),
report reconstruction of the validation probe pillars and of held-out training crops."""
import sys, time, numpy as np, torch
from components.common.seeds import seed_everything
from components.common.train import fit
from components.persist.models import VAE3D, class_weights
from components.persist.world import LANDMARKS
torch.set_num_threads(1)
arch, power, steps, lat, width = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
augment, insert = int(sys.argv[6]), int(sys.argv[7])
from components.persist.train import augment_crops
rng = np.random.default_rng(0)
d = np.load("/tmp/persist_cal/dev.npz")
seed_everything(0)
flat = torch.as_tensor(d["crops"].reshape(-1, *d["crops"].shape[2:]))
perm = torch.randperm(len(flat)); n_val = len(flat) // 20
val, tr = flat[perm[:n_val]], flat[perm[n_val:]]
model = VAE3D(lat, width, arch=arch)
gen = torch.Generator().manual_seed(0)
def batches():
    while True:
        b = tr[torch.randint(len(tr), (16,), generator=gen)]
        yield augment_crops(b, rng, insert) if augment else b
wt = class_weights(d["crops"], power)
t0 = time.time()
fit(model, batches(), lambda m, b: m.loss(b, class_weight=wt), steps=steps, lr=2e-3, warmup=steps // 20)
train_s = time.time() - t0
@torch.no_grad()
def recon(x):
    return torch.cat([model.decode(model.encode(b)).argmax(1) for b in x.split(64)])
pv = recon(val); lv = val.long()
acc = lambda m: float((pv == lv)[m].float().mean())
lm = torch.isin(lv, torch.tensor(LANDMARKS))
# validation-world probe pillars: crop at t=0 (the spin stays in place), probe voxels in crop coords
vc = torch.as_tensor(d["val_crops"][:, 0]); pr = recon(vc)
hit, tot = 0, 0
for i in range(len(vc)):
    o = d["val_origins"][i, 0]
    for c in d["val_probe_cells"][i]:
        if c[0] < 0: continue
        x, y, z = c - o
        tot += 1; hit += int(pr[i, x, y, z] == d["val_colour"][i])
print(f"{arch} aug={augment} ins={insert} pow={power} steps={steps} lat={lat} width={width} params={sum(p.numel() for p in model.parameters())} "
      f"train_s={train_s:.0f} probe={hit/tot:.3f} all={acc(torch.ones_like(lm)):.3f} solid={acc(lv != 0):.3f} "
      f"air={acc(lv == 0):.3f} landmark={acc(lm):.3f} valworld_all={float((pr == vc.long()).float().mean()):.3f}", flush=True)
