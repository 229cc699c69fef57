"""A throw-away method for the determinism tests: one torch fan-out stage whose items draw from
every process-wide random source a real stage uses (weight init, dropout, data shuffling with
torch, numpy and python) and read the thread count, sleeping between draws so that items
running side by side interleave. Registered only by tests/runtime/test_determinism.py.
"""
from __future__ import annotations

import random
import time
from typing import ClassVar

import numpy as np

from components.common.config import MethodConfig
from components.common.seeds import seed_everything
from flows.runtime.dag import Method, Resources, Stage


class RngConfig(MethodConfig):
    seeds: list[int] = [0, 1, 2]
    steps: int = 6
    SMOKE: ClassVar[dict] = {}


def fit(cfg, ctx):
    import torch

    seed_everything(ctx.item["seed"])           # the way real stages seed: the global RNGs
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                                torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(64, 8)
    y = x.sum(dim=1, keepdim=True)
    order = np.random.permutation(64)          # numpy's global RNG
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[order], y[order]),
                                         batch_size=16, shuffle=True)  # torch's global RNG
    losses = []
    for _ in range(cfg.steps):
        for xb, yb in loader:
            time.sleep(0.002)                  # let items running beside this one draw too
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    ctx.write_metrics({"final_loss": losses[-1], "mean_loss": float(np.mean(losses)),
                       "python_draw": random.random(), "weight_sum": float(model[0].weight.sum()),
                       "torch_threads": torch.get_num_threads()})


R = "tests.runtime.rng_flow"
METHOD = Method(
    name="rng_flow",
    title="determinism test DAG",
    config=f"{R}:RngConfig",
    code=("tests/runtime/rng_flow.py",),
    stages=(
        Stage("fit", f"{R}:fit", params=("seeds", "steps"), fan_out={"seed": "seeds"},
              resources=Resources(num_cpus=1)),
    ),
)
