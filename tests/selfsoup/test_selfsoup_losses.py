"""The SSL objectives against their formulas on fixed tensors."""
import math

import numpy as np
import torch
import torch.nn.functional as F
from scipy.integrate import quad

from components.selfsoup import losses


def test_mmcr_orthonormal_centroids_give_minus_one():
    b, d = 8, 16
    q, _ = torch.linalg.qr(torch.randn(d, d, dtype=torch.float64))
    z = q[:b]                                   # B orthonormal rows, views identical
    assert math.isclose(losses.mmcr_loss(z, z).item(), -1.0, rel_tol=1e-9)


def test_mmcr_collapsed_centroids_give_minus_one_over_sqrt_b():
    b = 9
    z = torch.ones(b, 5, dtype=torch.float64)
    assert math.isclose(losses.mmcr_loss(z, z).item(), -1 / math.sqrt(b), rel_tol=1e-9)


def test_mmcr_matches_numpy_svd_including_local_term():
    g = torch.Generator().manual_seed(0)
    z1, z2 = torch.randn(6, 4, generator=g, dtype=torch.float64), torch.randn(6, 4, generator=g, dtype=torch.float64)
    n1, n2 = (z / np.linalg.norm(z, axis=1, keepdims=True) for z in (z1.numpy(), z2.numpy()))
    c = (n1 + n2) / 2
    glob = -np.linalg.svd(c, compute_uv=False).sum() / 6
    local = np.mean([np.linalg.svd(np.stack([n1[i], n2[i]]), compute_uv=False).sum() for i in range(6)])
    assert math.isclose(losses.mmcr_loss(z1, z2).item(), glob, rel_tol=1e-9)
    assert math.isclose(losses.mmcr_loss(z1, z2, local=True).item(), glob + local, rel_tol=1e-9)


def _epps_pulley_reference(x: np.ndarray) -> float:
    """Exact integral over the real line (our code: trapezoid on [0, 3] doubled)."""
    def integrand(t):
        return ((np.cos(t * x).mean() - np.exp(-t**2 / 2)) ** 2 + np.sin(t * x).mean() ** 2) * np.exp(-t**2 / 2)
    return len(x) * 2 * quad(integrand, 0, 3)[0]


def test_epps_pulley_matches_quadrature():
    x = np.random.default_rng(0).normal(0.3, 1.2, size=200)
    ours = losses.epps_pulley(torch.from_numpy(x).unsqueeze(1), knots=401).item()
    assert math.isclose(ours, _epps_pulley_reference(x), rel_tol=1e-4)
    coarse = losses.epps_pulley(torch.from_numpy(x).unsqueeze(1)).item()   # the 17-knot default
    assert math.isclose(coarse, ours, rel_tol=0.05)


def test_epps_pulley_flat_for_gaussian_grows_for_shifted():
    g = torch.Generator().manual_seed(0)
    gauss = [losses.epps_pulley(torch.randn(n, 64, generator=g, dtype=torch.float64)).mean().item()
             for n in (256, 4096)]
    shifted = [losses.epps_pulley(torch.randn(n, 64, generator=g, dtype=torch.float64) + 1.0).mean().item()
               for n in (256, 4096)]
    # E[stat] = 2 * int_0^3 (1 - exp(-t^2)) exp(-t^2/2) dt ~ 1.06 for any N
    assert all(0.8 < v < 1.3 for v in gauss) and abs(gauss[1] - gauss[0]) < 0.2
    assert shifted[0] > 10 * gauss[0]
    assert 10 < shifted[1] / shifted[0] < 22                                  # ~ linear in N (x16)


def test_sigreg_prefers_isotropic_gaussian_over_collapse():
    g = torch.Generator().manual_seed(1)
    iso = torch.randn(512, 8, generator=g)
    collapsed = torch.randn(512, 1, generator=g).repeat(1, 8) * 0.05
    assert losses.sigreg(iso, 32, torch.Generator().manual_seed(0)) < losses.sigreg(collapsed, 32, torch.Generator().manual_seed(0))


def test_lejepa_loss_terms():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(64, 8, generator=g)
    views = z.expand(4, -1, -1)
    # identical views: no invariance error, only lam * SIGReg remains
    gen = torch.Generator().manual_seed(3)    # one generator shared by the views, as in lejepa_loss
    reg = torch.stack([losses.sigreg(v, 16, gen) for v in views]).mean()
    assert torch.allclose(losses.lejepa_loss(views, 0.3, 16, torch.Generator().manual_seed(3)), 0.3 * reg, rtol=1e-5)
    noisy = views + torch.randn(4, 64, 8, generator=g)
    inv = (noisy - noisy.mean(0)).pow(2).mean()
    assert torch.allclose(losses.lejepa_loss(noisy, 0.0), inv)


def test_lejepa_invariance_is_a_mean_over_the_embedding_dimension():
    """Hand-computed: 2 views of 1 sample in d = 4. The centroid is (1, 1, 0, 0); every one of the
    8 coordinates is 1 away from it, except the last two of both views (0 away): mean = 4/8.
    LeJEPA's minimal code takes this mean; a sum over d would give 2.0 (d times more)."""
    views = torch.tensor([[[0.0, 2.0, 0.0, 0.0]], [[2.0, 0.0, 0.0, 0.0]]])   # (V=2, B=1, d=4)
    assert losses.lejepa_loss(views, 0.0).item() == 0.5
    # with lam the invariance keeps weight (1 - lam), whatever d is
    gen = torch.Generator().manual_seed(0)
    regulariser = torch.stack([losses.sigreg(v, 4, gen) for v in views]).mean().item()
    total = losses.lejepa_loss(views, 0.25, 4, torch.Generator().manual_seed(0)).item()
    assert math.isclose(total, 0.75 * 0.5 + 0.25 * regulariser, rel_tol=1e-6)


def test_info_nce_matches_manual_cross_entropy():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g)
    logits = F.normalize(q, dim=1) @ F.normalize(k, dim=1).T / 0.5
    manual = -torch.log_softmax(logits, 1).diag().mean() * 2 * 0.5
    assert torch.allclose(losses.info_nce(q, k, 0.5), manual)


def test_mae_loss_counts_only_masked_patches():
    pred, target = torch.zeros(1, 4, 2), torch.ones(1, 4, 2)
    target[0, 0] = 100.0                      # a visible patch: must not count
    masked = torch.tensor([[False, True, True, False]])
    assert losses.mae_loss(pred, target, masked).item() == 1.0


def test_knn_entropy_bounds():
    z = torch.ones(10, 4)                     # collapsed: every neighbour equally close
    assert math.isclose(losses.knn_neighbour_entropy(z, k=5).item(), math.log(5), rel_tol=1e-5)
    clustered = torch.cat([torch.eye(4)[i].repeat(3, 1) + 1e-3 * torch.randn(3, 4) for i in range(4)])
    assert losses.knn_neighbour_entropy(clustered, k=5).item() < math.log(5)


def test_mmcr_local_at_full_collapse_is_sqrt2_minus_one_over_sqrt_b():
    """The value the small profile's MMCR global+local ingredient sat at on every seed (1.2895 at
    B = 64): both views of every image map to one point, so each per-image nuclear norm is sqrt(2)
    and the centroid matrix has rank 1 (nuclear norm sqrt(B))."""
    b = 64
    z = torch.ones(b, 32, dtype=torch.float64)
    assert math.isclose(losses.mmcr_loss(z, z, local=True).item(), math.sqrt(2) - 1 / math.sqrt(b), rel_tol=1e-9)


def test_norm_pix_target_is_each_patch_standardised():
    """MAE's norm_pix_loss target (v6 knob): every patch mean 0, unbiased variance 1; a flat
    (background) patch becomes 0, not NaN."""
    g = torch.Generator().manual_seed(0)
    t = torch.rand(3, 5, 16, generator=g, dtype=torch.float64)
    t[0, 0] = 0.25
    n = losses.norm_pix(t)
    assert torch.allclose(n[1:].mean(-1), torch.zeros(2, 5, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(n[1:].var(-1), torch.ones(2, 5, dtype=torch.float64), atol=1e-4)
    assert torch.equal(n[0, 0], torch.zeros(16, dtype=torch.float64))
    ref = (t[2, 3] - t[2, 3].mean()) / (t[2, 3].var() + 1e-6).sqrt()
    assert torch.allclose(n[2, 3], ref)
