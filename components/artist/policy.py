"""Loading task tables as tensors, and running the controller-reasoner loop."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from components.artist.tasks import FAMILY_ID
from components.artist.model import MAX_OPTIONS, ArtistPolicy, mask_actions, mask_answers
from components.artist.views import build_all_views, candidate_actions, window_geometry


@dataclass
class TaskSet:
    family: list[str]
    family_id: torch.Tensor      # (N,)
    args: torch.Tensor           # (N, 2)
    n_options: torch.Tensor      # (N,)
    answer: torch.Tensor         # (N,)
    length: np.ndarray           # (N,)
    series: np.ndarray           # (N, L) zero-padded
    evidence: list
    decoys: list
    views: torch.Tensor          # (N, 1 + A, budget)
    geometry: torch.Tensor       # (1 + A, 3)

    def __len__(self) -> int:
        return len(self.answer)


def load_tasks(path: Path, views_cfg, budget: int | None = None, coarse_only: bool = False) -> TaskSet:
    from components.common.io import read_table

    t = read_table(path).to_pydict()
    series = np.asarray(t["series"], dtype=np.float32)
    lengths = np.asarray(t["length"])
    budget = budget or views_cfg.budget
    if coarse_only:   # static baselines: the coarse view alone (at their own budget)
        views = _coarse_only(series, lengths, budget)
    else:
        views = build_all_views(series, lengths, budget, views_cfg.n_fine, views_cfg.n_quarters)
    return TaskSet(family=list(t["family"]), family_id=torch.tensor(t["family_id"]),
                   args=torch.tensor(t["args"]), n_options=torch.tensor(t["n_options"]),
                   answer=torch.tensor(t["answer"]), length=lengths, series=series,
                   evidence=t["evidence"], decoys=t["decoys"], views=torch.from_numpy(views),
                   geometry=torch.from_numpy(window_geometry(views_cfg.n_fine, views_cfg.n_quarters)))


def _coarse_only(series: np.ndarray, lengths: np.ndarray, budget: int) -> np.ndarray:
    from components.artist.views import coarse_view

    out = []
    for s, n in zip(series, lengths):
        v = coarse_view(s[:int(n)], budget)
        out.append(((v - v.mean()) / (v.std() + 1e-3))[None])
    return np.stack(out).astype(np.float32)


def make_policy(model_cfg, views_cfg, budget: int | None = None, max_views: int | None = None) -> ArtistPolicy:
    n_actions = views_cfg.n_fine + views_cfg.n_quarters
    return ArtistPolicy(n_actions=n_actions, budget=budget or views_cfg.budget,
                        max_views=max_views or 1 + views_cfg.max_zooms, d_model=model_cfg.d_model,
                        n_layers=model_cfg.n_layers, n_heads=model_cfg.n_heads, patch=model_cfg.patch,
                        dropout=model_cfg.dropout, encoder=model_cfg.encoder,
                        n_fine=views_cfg.n_fine if model_cfg.pointer else 0,
                        n_quarters=views_cfg.n_quarters if model_cfg.pointer else 0,
                        geometry=model_cfg.geometry)


def gather_inputs(tasks: TaskSet, idx: torch.Tensor, chosen: torch.Tensor):
    """Everything the policy receives for examples ``idx`` after zooming into ``chosen``:
    question (family, args), the coarse view and the chosen views only, their geometry."""
    b = len(idx)
    view_idx = torch.cat([torch.zeros(b, 1, dtype=torch.long), (chosen + 1).clamp(min=0)], dim=1)
    present = torch.cat([torch.ones(b, 1, dtype=torch.bool), chosen >= 0], dim=1)
    views = tasks.views[idx[:, None], view_idx] * present[:, :, None]
    # a question that names windows (compare) gets their geometry, in the views' coordinates
    names = (tasks.family_id[idx] == FAMILY_ID["compare"])[:, None, None]
    args = tasks.geometry[tasks.args[idx] + 1] * names
    return tasks.family_id[idx], args, views, tasks.geometry[view_idx], present


def forward_state(model: ArtistPolicy, tasks: TaskSet, idx: torch.Tensor,
                  chosen: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked (controller, answer) logits for examples ``idx`` after zooming into ``chosen``
    ((b, R) action ids, -1 = none). The model receives only the coarse view and the chosen views."""
    ctrl, ans = model(*gather_inputs(tasks, idx, chosen))
    ctrl = mask_actions(ctrl, chosen, model.n_actions)
    return ctrl, mask_answers(ans, tasks.n_options[idx])


@torch.no_grad()
def rollout(model: ArtistPolicy, tasks: TaskSet, idx: torch.Tensor, max_zooms: int, temperature: float,
            generator: torch.Generator | None = None, greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the controller until STOP or ``max_zooms``; returns chosen actions (b, max_zooms) and
    the reasoner's answer logits on the final round (b, options)."""
    b = len(idx)
    chosen = torch.full((b, max_zooms), -1, dtype=torch.long)
    done = torch.zeros(b, dtype=torch.bool)
    final = torch.zeros(b, MAX_OPTIONS)
    for r in range(max_zooms + 1):
        active = torch.nonzero(~done)[:, 0]
        if len(active) == 0:
            break
        ctrl, ans = forward_state(model, tasks, idx[active], chosen[active])
        final[active] = ans
        if r == max_zooms:
            break
        if greedy:
            action = ctrl.argmax(dim=1)
        else:
            action = torch.multinomial(torch.softmax(ctrl / temperature, dim=1), 1, generator=generator)[:, 0]
        stop = action == model.n_actions
        chosen[active[~stop], r] = action[~stop]
        done[active[stop]] = True
    return chosen, final


@torch.no_grad()
def answer_with(model: ArtistPolicy, tasks: TaskSet, idx: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """Reasoner answer logits after a given (e.g. random or oracle) segment sequence."""
    return forward_state(model, tasks, idx, chosen)[1]


def sample_answers(logits: torch.Tensor, temperature: float, n: int,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """(b, n) answers sampled at ``temperature`` (masked options have probability 0)."""
    probs = torch.softmax(logits / temperature, dim=1)
    return torch.multinomial(probs, n, replacement=True, generator=generator)


def oracle_actions(tasks: TaskSet, n_fine: int, max_zooms: int) -> torch.Tensor:
    """(N, max_zooms) the windows of every candidate event (real and decoy) in position order;
    one window for global evidence (any window shows it); none for series too short to zoom."""
    out = torch.full((len(tasks), max_zooms), -1, dtype=torch.long)
    for i, (ev, dec, n) in enumerate(zip(tasks.evidence, tasks.decoys, tasks.length)):
        acts = oracle_row(ev, dec, int(n), n_fine, max_zooms)
        out[i, :len(acts)] = torch.tensor(acts, dtype=torch.long)
    return out


def oracle_row(evidence: list, decoys: list, length: int, n_fine: int, max_zooms: int) -> list[int]:
    """The oracle's window ids for one series (see ``oracle_actions``)."""
    acts = candidate_actions(evidence, decoys, length, n_fine)[:max_zooms]
    if not acts and any(e - s >= length // 2 for s, e in evidence) and length > 4 * n_fine:
        acts = [0]
    return acts


@torch.no_grad()
def oracle_accuracy(model: ArtistPolicy, tasks: TaskSet, n_fine: int, max_zooms: int) -> dict[str, float]:
    """Greedy reasoner accuracy per family after the oracle windows (the premise that the reasoner
    can read the evidence once it is shown)."""
    model.eval()
    chosen = oracle_actions(tasks, n_fine, max_zooms)
    pred = torch.cat([forward_state(model, tasks, idx, chosen[idx])[1].argmax(1)
                      for idx in torch.arange(len(tasks)).split(256)])
    hit = (pred == tasks.answer).numpy()
    fam = np.asarray(tasks.family)
    return {f: float(hit[fam == f].mean()) for f in dict.fromkeys(tasks.family)}
