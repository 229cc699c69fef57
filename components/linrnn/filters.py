"""Exact Bayes filtering in log space and the two linear filters of the paper.

Conventions (a wrong transpose silently breaks everything, so they are fixed here):
- ``T[i, j] = P(s_k = i | s_{k-1} = j)`` (column-stochastic); a permutation ``P`` has
  ``P[sigma(j), j] = 1``.
- ``E[i, o] = P(y = o | s = i)``; ``B = log E`` is the input matrix of the linear filter.
- Logits ``l`` are unnormalised log-beliefs, equal to the log-forward variables up to an
  additive constant.
"""
from __future__ import annotations

import numpy as np
from scipy.integrate import quad
from scipy.special import logsumexp, softmax

from components.common.io import write_json_atomic
from components.common.seeds import seed_everything


def random_permutation_matrix(n: int, rng: np.random.Generator) -> np.ndarray:
    perm = rng.permutation(n)
    P = np.zeros((n, n))
    P[perm, np.arange(n)] = 1.0          # state j moves to perm[j]
    return P


def random_emissions(n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """Strictly positive emission rows (B = log E must be finite)."""
    return rng.dirichlet(np.ones(m), size=n)


def log_forward(log_T: np.ndarray, log_E: np.ndarray, l0: np.ndarray, ys: np.ndarray,
                log_Ts: list[np.ndarray] | None = None) -> np.ndarray:
    """Exact Bayes (log-forward) logits l_1..l_K; ``log_Ts[k]`` overrides ``log_T`` at step k
    (action-controlled chains)."""
    l, out = l0, []
    for k, y in enumerate(ys):
        lt = log_T if log_Ts is None else log_Ts[k]
        l = log_E[:, y] + logsumexp(lt + l[None, :], axis=1)
        out.append(l)
    return np.array(out)


def linear_filter(P: np.ndarray, B: np.ndarray, l0: np.ndarray, ys: np.ndarray,
                  Ps: list[np.ndarray] | None = None, first_input: np.ndarray | None = None) -> np.ndarray:
    """Filter 1: l_k = P l_{k-1} + B y_k (time-varying P(a_{k-1}) when ``Ps`` is given).
    ``first_input`` is the one-off correction u_1 added at k = 1."""
    l, out = l0, []
    for k, y in enumerate(ys):
        A = P if Ps is None else Ps[k]
        l = _matvec(A, l) + B[:, y]
        if k == 0 and first_input is not None:
            l = l + first_input
        out.append(l)
    return np.array(out)


def _matvec(A: np.ndarray, l: np.ndarray) -> np.ndarray:
    # a permutation times a vector with -inf entries: gather instead of multiply (0 * -inf = nan)
    if np.all((A == 0) | (A == 1)) and np.all(A.sum(axis=1) == 1):
        return l[A.argmax(axis=1)]
    return A @ l


def simulate_hmm(T_list: list[np.ndarray], E: np.ndarray, pi0: np.ndarray, rng: np.random.Generator):
    """Sample states s_1..s_K and observations y_1..y_K (T_list[k] is the transition into step k+1)."""
    s = rng.choice(len(pi0), p=pi0)
    states, obs = [], []
    for T in T_list:
        s = rng.choice(T.shape[0], p=T[:, s])
        states.append(s)
        obs.append(rng.choice(E.shape[1], p=E[s]))
    return np.array(states), np.array(obs)


def logit_gap(a: np.ndarray, b: np.ndarray) -> float:
    """max_k of (max_i - min_i) of a_k - b_k over finite entries: 0 iff equal up to a constant."""
    if not np.array_equal(np.isfinite(a), np.isfinite(b)):
        return float("inf")            # one filter rules out a state the other keeps
    with np.errstate(invalid="ignore"):
        diff = np.where(np.isfinite(a), a - b, np.nan)
    return float(np.nanmax(np.nanmax(diff, axis=1) - np.nanmin(diff, axis=1)))


def belief_gap(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(softmax(a, axis=1) - softmax(b, axis=1)).max())


def check_time_invariant(n: int, m: int, steps: int, rng: np.random.Generator) -> dict[str, float]:
    P = random_permutation_matrix(n, rng)
    E = random_emissions(n, m, rng)
    pi0 = rng.dirichlet(np.ones(n))
    _, ys = simulate_hmm([P] * steps, E, pi0, rng)
    l0 = np.log(pi0)
    with np.errstate(divide="ignore"):
        lof = log_forward(np.log(P), np.log(E), l0, ys)
    lin = linear_filter(P, np.log(E), l0, ys)
    # negative control: a genuinely stochastic T breaks the LSE collapse
    T = rng.dirichlet(np.ones(n), size=n).T
    lof_ctrl = log_forward(np.log(T), np.log(E), l0, ys)
    lin_ctrl = linear_filter(T, np.log(E), l0, ys)
    return {"belief_gap": belief_gap(lin, lof), "logit_gap": logit_gap(lin, lof),
            "control_belief_gap": belief_gap(lin_ctrl, lof_ctrl),
            "is_symmetric_P": float(np.allclose(P, P.T))}


def check_action_controlled(n: int, m: int, n_actions: int, inits: int, steps: int,
                            rng: np.random.Generator) -> dict[str, float]:
    """Cor. 4.5: l_k = P(a_{k-1}) l_{k-1} + B y_k, started from l~_0 = 0 with the first-step
    correction u_1 = P(a_0)(l*_0 - l~_0); priors with zeros included (-inf logits)."""
    Ps = [random_permutation_matrix(n, rng) for _ in range(n_actions)]
    E = random_emissions(n, m, rng)
    B = np.log(E)
    worst_belief, worst_logit, worst_uncorrected = 0.0, 0.0, 0.0
    for i in range(inits):
        pi0 = rng.dirichlet(np.ones(n))
        if i % 2:                               # half of the priors rule some states out
            pi0[rng.choice(n, size=n // 2, replace=False)] = 0.0
            pi0 /= pi0.sum()
        actions = rng.integers(n_actions, size=steps)
        P_seq = [Ps[a] for a in actions]
        _, ys = simulate_hmm(P_seq, E, pi0, rng)
        with np.errstate(divide="ignore"):
            l_star = np.log(pi0)
            lof = log_forward(None, B, l_star, ys, log_Ts=[np.log(P) for P in P_seq])
        zero = np.zeros(n)
        lin = linear_filter(None, B, zero, ys, Ps=P_seq, first_input=_matvec(P_seq[0], l_star - zero))
        plain = linear_filter(None, B, zero, ys, Ps=P_seq)
        worst_belief = max(worst_belief, belief_gap(lin, lof))
        worst_logit = max(worst_logit, logit_gap(lin, lof))
        worst_uncorrected = max(worst_uncorrected, belief_gap(plain, lof))
    return {"belief_gap": worst_belief, "logit_gap": worst_logit,
            "uncorrected_belief_gap": worst_uncorrected}


def verify_exact_stage(cfg, ctx) -> None:
    rng = seed_everything(20260529)
    p = cfg.exact
    time_invariant = check_time_invariant(p.n_states, p.n_obs, p.n_steps, rng)
    action = check_action_controlled(p.n_states, p.n_obs, p.n_actions, p.action_inits, p.action_steps, rng)
    result = {"time_invariant": time_invariant, "action_controlled": action}
    write_json_atomic(ctx.out_dir / "exact.json", result)
    ctx.write_metrics(result)


# --- Large-deviation exponent of the two-state chain (Eq. 66, App. D) -------------------

def two_state_model() -> tuple[np.ndarray, np.ndarray]:
    """Swap permutation and the 0.9/0.1 emissions."""
    return np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([[0.9, 0.1], [0.1, 0.9]])


def exponent_xi(P: np.ndarray, E: np.ndarray) -> dict[str, float]:
    """xi = min over ordered distinct pairs (i, j) of
    -(1/M) sum_{n in Gamma_ij} int_0^{-1/M} Lambda_n(t)/t dt, Lambda_n(t) = log E_p[(p/q)^t]."""
    n = len(P)
    sigma = P.argmax(axis=0)
    M, cur = 1, sigma.copy()
    while not np.array_equal(cur, np.arange(n)):
        cur, M = sigma[cur], M + 1
    per_pair = {}
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            total, a, b = 0.0, i, j
            for _ in range(M):
                p, q = E[a], E[b]
                if not np.allclose(p, q):
                    lam = lambda t, p=p, q=q: np.log(np.sum(p * (p / q) ** t)) / t
                    total += quad(lam, 0.0, -1.0 / M, limit=200)[0]
                a, b = sigma[a], sigma[b]
            per_pair[f"{i}->{j}"] = -total / M
    return {"xi": min(per_pair.values()), "order_M": M, **{f"xi_{k}": v for k, v in per_pair.items()}}


def certify_exponent_stage(cfg, ctx) -> None:
    result = exponent_xi(*two_state_model())
    write_json_atomic(ctx.out_dir / "xi.json", result)
    ctx.write_metrics(result)
