"""PPO on RingWorld for every memory variant, on one code path.

- Filter variants (memoryless, LOF/ALF direct/softmax) feed fixed features of the history to
  an MLP actor-critic.
- ``lru`` is the recurrent baseline: an LRU/S5-style complex-diagonal linear RNN (hidden size
  ``rnn_hidden``) over [one-hot observation, one-hot previous action], trained end to end with
  truncated BPTT over each rollout segment, feeding the same MLP.
- ``s5_h<N>`` and ``deep_alf_h<N>`` are the paper's recurrent memories (``recurrent.py``):
  an S5 stack with N state dimensions per layer and the learned ALF with N states, over the
  same inputs as ``lru`` and into the same MLP.

Every variant gets the same budget, the same PPO settings and the same head (``network``:
the small profile's shared tanh MLP, or Lu et al.'s separate actor and critic bodies with
their initialisation in the paper profile, which also clips the value loss as they do);
minibatches are whole env columns of the rollout (what BPTT needs), for all variants alike.
All randomness comes from one numpy generator per run (parameter init, action sampling,
minibatch order): runs of the fan-out share a process under the threads executor, so
torch's global generator would make them depend on each other's timing.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from components.common.devices import resolve_device
from components.common.io import save_torch, write_table
from components.common.rl import gae, ppo_loss
from components.common.seeds import seed_everything
from components.linrnn.config import FILTER_VARIANTS, parse_recurrent
from components.common.linear_recurrence import truncated_normal
from components.linrnn.recurrent import DeepALFPolicy, S5Policy, random_orthogonal
from components.linrnn.ringworld import MOVES, FilterFeatures, RingSpec, RingWorld

N_ACTIONS = len(MOVES)


class InputFeatures:
    """What the recurrent baseline reads each step: one-hot observation and previous action
    (zero at an episode's first step). Same interface as FilterFeatures."""

    def __init__(self, spec: RingSpec, n_envs: int):
        self.n_obs = spec.n_obs
        self.obs = np.zeros(n_envs, dtype=int)
        self.prev_action = np.full(n_envs, -1)

    @property
    def dim(self) -> int:
        return self.n_obs + N_ACTIONS

    @property
    def state(self) -> np.ndarray:
        x = np.zeros((len(self.obs), self.dim))
        x[np.arange(len(self.obs)), self.obs] = 1.0
        has_prev = self.prev_action >= 0
        x[np.flatnonzero(has_prev), self.n_obs + self.prev_action[has_prev]] = 1.0
        return x

    def reset(self, mask: np.ndarray, y: np.ndarray) -> None:
        self.obs[mask], self.prev_action[mask] = y[mask], -1

    def update(self, actions: np.ndarray, y: np.ndarray) -> None:
        self.obs, self.prev_action = y.copy(), actions.copy()


class MLPHead(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.pi, self.v = nn.Linear(hidden, N_ACTIONS), nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(x)
        return self.pi(h), self.v(h).squeeze(-1)


class ActorCriticHead(nn.Module):
    """Lu et al.'s (2023) PPO head: separate actor and critic bodies of two leaky-ReLU layers
    each, orthogonal initialisation with gains 2 (bodies), 0.01 (policy) and 1 (value)."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.actor, self.critic = (nn.Sequential(nn.Linear(dim, hidden), nn.LeakyReLU(),
                                                 nn.Linear(hidden, hidden), nn.LeakyReLU()) for _ in range(2))
        self.pi, self.v = nn.Linear(hidden, N_ACTIONS), nn.Linear(hidden, 1)
        for layer in [*self.actor[::2], *self.critic[::2]]:
            layer.orthogonal_gain = 2.0
        self.pi.orthogonal_gain, self.v.orthogonal_gain = 0.01, 1.0

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pi(self.actor(x)), self.v(self.critic(x)).squeeze(-1)


NETWORKS = {"mlp": MLPHead, "popjaxrl": ActorCriticHead}


class FeaturePolicy(nn.Module):
    """Memoryless in itself: everything it remembers is in the fixed features."""

    state_size = 0

    def __init__(self, head: nn.Module):
        super().__init__()
        self.head = head

    def initial_state(self, n: int) -> torch.Tensor:
        return torch.zeros(n, self.state_size)

    def step(self, x, h, start):
        logits, value = self.head(x)
        return logits, value, h

    def sequence(self, xs, h0, starts):
        return self.head(xs)


class DiagonalLinearRNN(nn.Module):
    """h_t = lambda ⊙ h_{t-1} + gamma ⊙ (B x_t) with complex diagonal lambda = exp(-exp(nu) + i theta),
    |lambda| initialised uniformly in [r_min, r_max] and gamma = sqrt(1 - |lambda|^2) (LRU,
    Orvieto et al. 2023). Complex numbers are kept as (real, imaginary) halves."""

    def __init__(self, in_dim: int, size: int, rng: np.random.Generator, r_min: float = 0.5, r_max: float = 0.99):
        super().__init__()
        radius = np.sqrt(rng.uniform(r_min**2, r_max**2, size))
        self.nu_log = nn.Parameter(torch.tensor(np.log(-np.log(radius)), dtype=torch.float32))
        self.theta = nn.Parameter(torch.tensor(rng.uniform(0, 2 * np.pi, size), dtype=torch.float32))
        self.B = nn.Linear(in_dim, 2 * size, bias=False)
        self.size = size

    def step(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        radius = torch.exp(-torch.exp(self.nu_log))
        c, s = radius * torch.cos(self.theta), radius * torch.sin(self.theta)
        gamma = torch.sqrt(1 - radius**2)
        u_re, u_im = (gamma.repeat(2) * self.B(x)).chunk(2, dim=-1)
        h_re, h_im = h.chunk(2, dim=-1)
        return torch.cat([c * h_re - s * h_im + u_re, s * h_re + c * h_im + u_im], dim=-1)


class RecurrentPolicy(nn.Module):
    """Diagonal linear RNN, then the MLP head on [Re h, Im h, x] (the S5/LRU output map C h + D x
    folded into the head's first layer)."""

    def __init__(self, in_dim: int, size: int, head_class, hidden: int, rng: np.random.Generator):
        super().__init__()
        self.rnn = DiagonalLinearRNN(in_dim, size, rng)
        self.head = head_class(2 * size + in_dim, hidden)
        self.state_size = 2 * size

    def initial_state(self, n: int) -> torch.Tensor:
        return torch.zeros(n, self.state_size)

    def step(self, x, h, start):
        h = self.rnn.step(h * (1 - start)[:, None], x)    # a new episode starts from h = 0
        logits, value = self.head(torch.cat([h, x], dim=-1))
        return logits, value, h

    def sequence(self, xs, h0, starts):
        h, logits, values = h0, [], []
        for t in range(xs.shape[0]):
            lg, v, h = self.step(xs[t], h, starts[t])
            logits.append(lg), values.append(v)
        return torch.stack(logits), torch.stack(values)


def init_parameters(model: nn.Module, rng: np.random.Generator) -> None:
    """PyTorch's default Linear init, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), drawn from ``rng``."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            bound = 1 / math.sqrt(module.in_features)
            with torch.no_grad():
                for param in (module.weight, module.bias):
                    if param is not None:
                        param.copy_(torch.from_numpy(rng.uniform(-bound, bound, param.shape)))


def init_popjaxrl(model: nn.Module, rng: np.random.Generator) -> None:
    """Lu et al.'s (flax) initialisers, drawn from ``rng``: orthogonal weights where a layer
    names its gain, lecun-normal (truncated) weights elsewhere, zero biases."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            gain = getattr(module, "orthogonal_gain", None)
            out_dim, in_dim = module.weight.shape
            weight = (gain * random_orthogonal(out_dim, rng, in_dim) if gain is not None
                      else truncated_normal(rng, (out_dim, in_dim), 1 / math.sqrt(in_dim)))
            with torch.no_grad():
                module.weight.copy_(torch.from_numpy(weight))
                if module.bias is not None:
                    module.bias.zero_()


INITIALISERS = {"mlp": init_parameters, "popjaxrl": init_popjaxrl}


def build(variant: str, spec: RingSpec, p, rng: np.random.Generator):
    """The variant's memory and model; ``p.network`` picks the head and its initialisation
    (``mlp``: one shared tanh trunk, torch's default init; ``popjaxrl``: Lu et al.'s)."""
    recurrent, head = parse_recurrent(variant), NETWORKS[p.network]
    if variant == "lru":
        memory = InputFeatures(spec, p.n_envs)
        model = RecurrentPolicy(memory.dim, p.rnn_hidden, head, p.hidden, rng)
    elif recurrent:
        kind, size = recurrent
        memory = InputFeatures(spec, p.n_envs)
        if kind == "s5":
            model = S5Policy(memory.dim, size, p.s5_width, p.s5_layers, head(p.s5_width, p.hidden), rng)
        else:
            model = DeepALFPolicy(spec.n_obs, N_ACTIONS, size, p.alf_delta, head(size, p.hidden), rng)
    elif variant in FILTER_VARIANTS:
        memory = FilterFeatures(variant, spec, p.n_envs, p.alf_delta)
        model = FeaturePolicy(head(memory.dim, p.hidden))
    else:
        raise ValueError(f"unknown RingWorld variant {variant!r}")
    INITIALISERS[p.network](model, rng)
    return memory, model


def sample(logits: torch.Tensor, rng: np.random.Generator) -> np.ndarray:
    probs = torch.softmax(logits, dim=-1).double().numpy()
    cdf = np.cumsum(probs, axis=1)
    return np.minimum((rng.random(len(probs))[:, None] > cdf).sum(axis=1), probs.shape[1] - 1)


def trained_steps(p) -> int:
    """Env steps a run trains for: whole PPO updates of n_envs x rollout_len steps."""
    return max(1, p.total_steps // (p.n_envs * p.rollout_len)) * p.n_envs * p.rollout_len


def start_run(variant: str, seed: int, p):
    """The run's generator, envs, memory, model (on its device), optimizer and rollout state."""
    rng = seed_everything(seed)
    device = resolve_device(p.device)
    spec = RingSpec(p)
    env = RingWorld(spec, p.n_envs, rng)
    memory, model = build(variant, spec, p, rng)
    model.to(device)
    memory.reset(np.ones(p.n_envs, dtype=bool), env.observe())
    optimizer = torch.optim.Adam(model.parameters(), lr=p.lr, eps=p.adam_eps)
    run = {"h": model.initial_state(p.n_envs).to(device), "start": torch.ones(p.n_envs, device=device),
           "device": device, "episode_return": np.zeros(p.n_envs), "finished": []}   # finished: (env steps, return)
    return rng, env, memory, model, optimizer, run


def train_ppo(variant: str, seed: int, p, progress=None, log=None) -> dict:
    """PPO on one memory variant; returns the model, the episode curve and the final return."""
    rng, env, memory, model, optimizer, run = start_run(variant, seed, p)
    steps_per_update = p.n_envs * p.rollout_len
    n_updates = trained_steps(p) // steps_per_update
    for update in range(n_updates):
        batch = collect(env, memory, model, p, run, update * steps_per_update, rng)
        ppo_update(model, optimizer, batch, p, rng)
        if log:
            recent = [r for s, r in run["finished"] if s > update * steps_per_update]
            if recent:
                log("episode_return", float(np.mean(recent)), (update + 1) * steps_per_update)
        if progress:
            progress(update + 1, n_updates, f"{variant} seed {seed}")
    total = trained_steps(p)
    tail = [r for s, r in run["finished"] if s > 0.9 * total]
    return {"model": model.state_dict(), "curve": run["finished"],
            "final_return": float(np.mean(tail)) if tail else float("nan"), "env_steps": total}


def collect(env, memory, model, p, run, base_step, rng) -> dict[str, torch.Tensor]:
    keys = ("x", "start", "act", "logp", "value", "reward", "done")
    roll = {k: [] for k in keys}
    h0, device = run["h"], run["device"]
    tensor = lambda values, dtype=torch.float32: torch.as_tensor(values, dtype=dtype, device=device)
    with torch.no_grad():
        for t in range(p.rollout_len):
            x = tensor(memory.state)
            logits, value, run["h"] = model.step(x, run["h"], run["start"])
            action = sample(logits.cpu(), rng)
            act = tensor(action, torch.long)
            logp = torch.log_softmax(logits, dim=-1).gather(-1, act[:, None]).squeeze(-1)
            reward, done, y = env.step(action)
            run["episode_return"] += reward
            for i in np.flatnonzero(done):
                run["finished"].append((base_step + (t + 1) * p.n_envs, float(run["episode_return"][i])))
            run["episode_return"][done] = 0.0
            memory.update(action, y)
            memory.reset(done, y)
            for key, val in zip(keys, (x, run["start"], act, logp, value, tensor(reward), tensor(done))):
                roll[key].append(val)
            run["start"] = tensor(done)
        _, last_value, _ = model.step(tensor(memory.state), run["h"], run["start"])
    batch = {k: torch.stack(v) for k, v in roll.items()}          # (time, env, ...)
    batch["adv"], batch["ret"] = gae(batch["reward"], batch["value"], batch["done"], last_value,
                                     p.gamma, p.gae_lambda)
    batch["h0"] = h0
    return batch


def ppo_update(model, optimizer, batch, p, rng) -> None:
    n_envs = batch["act"].shape[1]
    for _ in range(p.ppo_epochs):
        for cols in np.array_split(rng.permutation(n_envs), p.minibatches):
            idx = torch.as_tensor(cols, device=batch["act"].device)
            logits, value = model.sequence(batch["x"][:, idx], batch["h0"][idx], batch["start"][:, idx])
            logp_all = torch.log_softmax(logits, dim=-1)
            act = batch["act"][:, idx]
            logp = logp_all.gather(-1, act[..., None]).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
            loss = ppo_loss(logp.flatten(), batch["logp"][:, idx].flatten(), batch["adv"][:, idx].flatten(),
                            value.flatten(), batch["ret"][:, idx].flatten(), entropy.flatten(),
                            p.clip, value_coef=p.value_coef, entropy_coef=p.entropy_coef,
                            old_values=batch["value"][:, idx].flatten() if p.clip_value_loss else None)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()


def train_stage(cfg, ctx) -> None:
    torch.set_num_threads(1)   # tiny models: threads only add overhead, and fan-out items run in parallel
    variant, seed = ctx.item["variant"], ctx.item["seed"]
    result = train_ppo(variant, seed, cfg.ringworld, progress=ctx.progress,
                       log=lambda name, value, step: ctx.log_metric(name, value, step))
    save_torch(ctx.out_dir / "policy.pt", result["model"])
    steps, returns = zip(*result["curve"]) if result["curve"] else ((), ())
    write_table(ctx.out_dir / "episodes.parquet", {"env_step": list(steps), "return": list(returns)})
    ctx.write_metrics({"final_return": result["final_return"], "env_steps": result["env_steps"],
                       "episodes": len(returns)})
