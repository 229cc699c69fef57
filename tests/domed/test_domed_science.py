"""Closed forms, reference implementations and invariants of the DomED science."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from components.common import metrics
from components.domed.config import DomedConfig
from components.domed.allocation import teacher_domains, unseen_mask, unseen_teachers
from components.domed.losses import (dirichlet_log_prob, dirichlet_nll, distill_loss, mask_weights,
                                     smooth_probs, student_loss)
from components.domed.uncertainty import (dirichlet_uncertainty, ensemble_uncertainty,
                                          prediction_rejection_ratio)

SOURCES = [0, 1, 2, 4, 5]  # fold with test domain 3


# ---- allocation -------------------------------------------------------------------------

@pytest.mark.parametrize("scheme", ["single", "lodo", "dual"])
def test_unseen_mask_never_lets_a_teacher_score_its_own_domain(scheme):
    taus = teacher_domains(scheme, SOURCES)
    domains = np.repeat(SOURCES, 7)
    mask = unseen_mask(domains, taus)
    for n, d in enumerate(domains):
        for m, tau in enumerate(taus):
            assert mask[n, m] == (d not in tau)
    assert mask.any(axis=1).all()


def test_single_domain_allocation_is_one_teacher_per_source():
    taus = teacher_domains("single", SOURCES)
    assert taus == [[d] for d in SOURCES]
    assert unseen_teachers(taus, 4) == [0, 1, 2, 4]          # teacher 3 trained on domain 4


def test_all_sources_allocation_has_no_unseen_teacher():
    with pytest.raises(ValueError, match="no unseen teacher"):
        unseen_mask(np.array(SOURCES), teacher_domains("all", SOURCES))


# ---- Dirichlet --------------------------------------------------------------------------

def test_dirichlet_log_prob_matches_torch_distributions():
    gen = torch.Generator().manual_seed(0)
    alpha = torch.rand(6, 10, generator=gen, dtype=torch.float64) * 20 + 0.1
    probs = torch.distributions.Dirichlet(alpha).sample((3,))
    expected = torch.distributions.Dirichlet(alpha).log_prob(probs)
    torch.testing.assert_close(dirichlet_log_prob(probs, alpha), expected)


def test_dirichlet_log_prob_closed_forms():
    p = torch.tensor([[0.3, 0.7]], dtype=torch.float64)
    assert dirichlet_log_prob(p, torch.ones(1, 2, dtype=torch.float64)).item() == pytest.approx(0.0)
    # Dir(2, 1) on the 1-simplex has density 2 * p_1
    assert dirichlet_log_prob(p, torch.tensor([[2.0, 1.0]], dtype=torch.float64)).item() == pytest.approx(np.log(0.6))


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_dirichlet_nll_is_masked_mean_over_teachers_at_temperature(temperature):
    """EnD^2 form: -T^2 mean_{m in U(d)} log Dir(softmax(f_m / T) | exp(z / T))."""
    gen = torch.Generator().manual_seed(1)
    z, t = torch.randn(4, 5, generator=gen), torch.randn(4, 3, 5, generator=gen)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 1, 1], [1, 1, 1]], dtype=torch.bool)
    alpha = torch.exp(z / temperature)
    targets = smooth_probs(t / temperature, 1e-6)
    per_teacher = torch.distributions.Dirichlet(alpha.unsqueeze(1).expand(-1, 3, -1)).log_prob(targets)
    expected = -temperature**2 * torch.stack([per_teacher[i][mask[i]].mean() for i in range(4)]).mean()
    got = dirichlet_nll(z, t, mask_weights(mask), temperature=temperature, clip=10.0, floor=1e-6)
    torch.testing.assert_close(got, expected)


def trained_scale_logits(gen, labels, margin, n_classes=10):
    """Logits of a trained classifier: the label's logit ``margin`` above unit-noise others."""
    z = torch.randn(len(labels), n_classes, generator=gen)
    z[torch.arange(len(labels)), labels] += margin
    return z


@pytest.mark.parametrize("margin", [5.0, 10.0])
def test_neither_loss_term_dominates_the_gradient_at_the_operating_point(margin):
    """At trained-scale logits (the label ~5-10 nats above the rest, as the teachers and a
    converged student give), beta * grad L_Dir and grad L_S (label CE + KD) stay within 10x of
    each other. The old alpha = exp(z) form at T = 1 gave a ratio of ~15-270 here."""
    cfg = DomedConfig()
    spec, student = cfg.student.specs["domed"], cfg.student
    gen = torch.Generator().manual_seed(4)
    labels = torch.randint(0, 10, (64,), generator=gen)
    teachers = torch.stack([trained_scale_logits(gen, labels, margin) for _ in range(4)], dim=1)
    z = trained_scale_logits(gen, labels, margin).requires_grad_()
    weights = mask_weights(torch.ones(64, 4, dtype=torch.bool))

    def grad_norm(loss):
        return torch.autograd.grad(loss, z)[0].norm().item()

    ls = grad_norm(spec.label_weight * F.cross_entropy(z, labels)
                   + spec.distill_weight * distill_loss(z, teachers, weights, student.temperature))
    ldir = grad_norm(spec.dirichlet_weight * dirichlet_nll(z, teachers, weights, student.temperature,
                                                           student.logit_clip, student.prob_floor))
    assert 0.1 <= ldir / ls <= 10.0, (ldir, ls)


def test_gradient_clipping_is_a_declared_param_passed_to_the_loop(monkeypatch):
    """The shared loop clips at 1.0 unless told otherwise; domed declares its own value."""
    from components.domed import train
    from components.domed.data import Split

    seen = {}

    class Stop(Exception):
        pass

    def fake_fit(*args, grad_clip, **kwargs):
        seen["grad_clip"] = grad_clip
        raise Stop

    monkeypatch.setattr(train, "fit", fake_fit)
    cfg = DomedConfig.for_profile("smoke", {"optim": {"grad_clip": 0.5}})
    split = Split(np.zeros((2, 1, 16, 16), np.float32), np.zeros(2, np.int64), np.zeros(2, np.int64), np.arange(2))
    with pytest.raises(Stop):
        train.train_model(cfg, split, split, lambda m, r: None, steps=1, seed=0)
    assert seen["grad_clip"] == 0.5
    assert "grad_clip" in DomedConfig().optim.model_dump()


def test_masked_out_teacher_has_no_influence():
    gen = torch.Generator().manual_seed(2)
    z, t = torch.randn(4, 5, generator=gen), torch.randn(4, 3, 5, generator=gen)
    mask = torch.tensor([[1, 1, 0]] * 4, dtype=torch.bool)
    t2 = t.clone()
    t2[:, 2] = 50 * torch.randn(4, 5, generator=gen)   # a wildly different seen teacher
    kw = dict(distill_weight=1.0, dirichlet_weight=0.05, label_weight=0.0, temperature=2.0, clip=10.0, floor=1e-6)
    y = torch.zeros(4, dtype=torch.long)
    assert student_loss(z, t, mask, y, **kw).item() == pytest.approx(student_loss(z, t2, mask, y, **kw).item())


def test_distill_loss_is_scaled_kl_and_shift_invariant_while_dirichlet_is_not():
    gen = torch.Generator().manual_seed(3)
    z, t = torch.randn(8, 10, generator=gen), torch.randn(8, 1, 10, generator=gen)
    w = torch.ones(8, 1)
    expected = 4.0 * F.kl_div(F.log_softmax(z / 2, -1), F.softmax(t[:, 0] / 2, -1), reduction="batchmean")
    torch.testing.assert_close(distill_loss(z, t, w, 2.0), expected)
    # decoupling: adding a constant to the logits only moves the Dirichlet precision
    torch.testing.assert_close(distill_loss(z + 3.0, t, w, 2.0), distill_loss(z, t, w, 2.0))
    assert dirichlet_nll(z + 3.0, t, w, 2.0, 10.0, 1e-6) != pytest.approx(dirichlet_nll(z, t, w, 2.0, 10.0, 1e-6).item())


# ---- uncertainty and metrics ------------------------------------------------------------

def test_dirichlet_expected_entropy_matches_monte_carlo():
    alpha = np.array([[2.0, 3.0, 0.5], [20.0, 1.0, 1.0]])
    u = dirichlet_uncertainty(alpha)
    samples = torch.distributions.Dirichlet(torch.as_tensor(alpha)).sample((40_000,)).numpy()
    mc = -(samples * np.log(np.clip(samples, 1e-300, None))).sum(-1).mean(0)
    np.testing.assert_allclose(u["expected"], mc, rtol=0.02)
    assert (u["mi"] > 0).all()
    assert dirichlet_uncertainty(alpha * 1e6)["mi"].max() < 1e-4   # infinite precision: no knowledge uncertainty


def test_ensemble_of_identical_members_has_zero_mutual_information():
    probs = np.tile(np.array([[0.2, 0.8], [0.5, 0.5]]), (4, 1, 1))
    assert np.allclose(ensemble_uncertainty(probs)["mi"], 0.0)


def test_prr_closed_forms():
    rng = np.random.default_rng(0)
    errors = (rng.random(500) < 0.3).astype(float)
    perfect = errors + 0.1 * rng.random(500)            # every error more uncertain than every hit
    assert prediction_rejection_ratio(perfect, errors) == pytest.approx(1.0)
    assert prediction_rejection_ratio(-perfect, errors) < -0.9
    randoms = [prediction_rejection_ratio(rng.random(500), errors) for _ in range(200)]
    assert abs(np.mean(randoms)) < 0.02


def test_ece_and_nll_match_references():
    torchmetrics = pytest.importorskip("torchmetrics")
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(400, 10)) * 3
    probs = torch.softmax(torch.as_tensor(logits), -1).numpy()
    labels = rng.integers(0, 10, 400)
    ref = torchmetrics.classification.MulticlassCalibrationError(num_classes=10, n_bins=15, norm="l1")
    assert metrics.ece(probs, labels, 15) == pytest.approx(float(ref(torch.as_tensor(probs), torch.as_tensor(labels))), abs=1e-6)
    assert metrics.nll(probs, labels) == pytest.approx(float(F.cross_entropy(torch.as_tensor(logits), torch.as_tensor(labels))), rel=1e-6)


def test_ece_closed_form():
    # two bins: conf 0.9 with 50% right, conf 0.6 always right -> 0.5*0.4 + 0.5*0.4
    probs = np.array([[0.9, 0.1], [0.9, 0.1], [0.6, 0.4], [0.6, 0.4]])
    labels = np.array([0, 1, 0, 0])
    assert metrics.ece(probs, labels, 15) == pytest.approx(0.4)
