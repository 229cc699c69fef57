"""PCA of activation differences vs scikit-learn."""
import numpy as np
import torch
from sklearn.decomposition import PCA

from components.caft.directions import pca


def test_pca_matches_sklearn_up_to_sign():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 40)) @ rng.normal(size=(40, 40)) + 3.0
    ours = pca(torch.tensor(x, dtype=torch.float32), 5)
    ref = PCA(n_components=5, svd_solver="full").fit(x)
    cos = np.abs(np.sum(ours["pcs"].numpy() * ref.components_, axis=1))
    np.testing.assert_allclose(cos, 1.0, atol=1e-4)
    np.testing.assert_allclose(ours["var_ratio"].numpy(), ref.explained_variance_ratio_, rtol=1e-4)
    np.testing.assert_allclose(ours["mean"].numpy(), x.mean(0), rtol=1e-5)


def test_pcs_are_orthonormal_and_sign_fixed():
    x = torch.randn(300, 20)
    out = pca(x, 6)["pcs"]
    torch.testing.assert_close(out @ out.T, torch.eye(6), atol=1e-5, rtol=0)
    assert (out.gather(1, out.abs().argmax(1, keepdim=True)) > 0).all()
