"""Science of linrnn: the filters against the forward algorithm, closed forms, invariants."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp

from components.linrnn import filters, sweeps


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def forward_algorithm(T, E, pi0, ys):
    """Textbook probability-space forward recursion, normalised each step."""
    b, out = pi0, []
    for y in ys:
        b = E[:, y] * (T @ b)
        b = b / b.sum()
        out.append(b)
    return np.array(out)


def test_log_forward_equals_forward_algorithm(rng):
    n, m = 5, 4
    T = rng.dirichlet(np.ones(n), size=n).T        # column-stochastic
    E = filters.random_emissions(n, m, rng)
    pi0 = rng.dirichlet(np.ones(n))
    _, ys = filters.simulate_hmm([T] * 30, E, pi0, rng)
    logits = filters.log_forward(np.log(T), np.log(E), np.log(pi0), ys)
    beliefs = np.exp(logits - logsumexp(logits, axis=1, keepdims=True))
    np.testing.assert_allclose(beliefs, forward_algorithm(T, E, pi0, ys), atol=1e-12)


def test_exact_linear_filter_on_non_symmetric_permutation(rng):
    result = filters.check_time_invariant(8, 12, 40, rng)
    assert result["is_symmetric_P"] == 0.0
    assert result["belief_gap"] <= 1e-12 and result["logit_gap"] <= 1e-9
    assert result["control_belief_gap"] > 0.1


def test_transposed_permutation_breaks_the_filter(rng):
    """The pitfall: using P^T (row convention) silently gives wrong beliefs."""
    n, m = 6, 5
    P = filters.random_permutation_matrix(n, rng)
    while np.allclose(P, P.T):
        P = filters.random_permutation_matrix(n, rng)
    E = filters.random_emissions(n, m, rng)
    pi0 = rng.dirichlet(np.ones(n))
    _, ys = filters.simulate_hmm([P] * 20, E, pi0, rng)
    with np.errstate(divide="ignore"):
        lof = filters.log_forward(np.log(P), np.log(E), np.log(pi0), ys)
    wrong = filters.linear_filter(P.T, np.log(E), np.log(pi0), ys)
    assert filters.belief_gap(wrong, lof) > 1e-3


def test_action_controlled_with_first_step_correction(rng):
    result = filters.check_action_controlled(8, 12, 4, 16, 60, rng)
    assert result["belief_gap"] <= 1e-10 and result["logit_gap"] <= 1e-9
    assert result["uncorrected_belief_gap"] > 1e-3        # the correction is needed


def test_permutation_spectrum_on_unit_circle(rng):
    P = filters.random_permutation_matrix(9, rng)
    assert np.allclose(np.abs(np.linalg.eigvals(P)), 1.0)


def test_exponent_of_two_state_chain():
    assert filters.exponent_xi(*filters.two_state_model())["xi"] == pytest.approx(0.7206014018, abs=1e-9)


def test_closed_form_decoders(rng):
    errors = sweeps.two_state_errors(np.array([100.0]), ["one", "zero", "bayes", "alf_0.7_log"],
                                     n_paths=20_000, n_steps=200, checkpoints=[200], rng=rng)
    assert errors[("zero", 200)][0] == 0.5                                  # always a tie
    assert errors[("one", 200)][0] == pytest.approx(0.1, abs=0.006)         # last observation
    assert errors[("bayes", 200)][0] <= errors[("alf_0.7_log", 200)][0] + 0.005


def test_delta_schedules():
    eps = np.array([0.01])
    assert sweeps.delta_for("alf_0.7_log", eps)[0] == pytest.approx(0.7 / np.log(100))
    assert sweeps.delta_for("alf_sqrt", eps)[0] == pytest.approx(0.1)
    assert sweeps.delta_for("eps_sq", eps)[0] == pytest.approx(1e-4)
