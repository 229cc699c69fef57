"""Weighted kNN against scikit-learn with the same cosine neighbours and exp(sim/T) votes."""
import numpy as np
import torch
from sklearn.neighbors import KNeighborsClassifier

from components.selfsoup.knn import weighted_knn_predict


def test_weighted_knn_matches_sklearn():
    rng = np.random.default_rng(0)
    bank = rng.normal(size=(200, 8))
    labels = rng.integers(0, 10, 200)
    queries = rng.normal(size=(50, 8))
    t = 0.07
    sk = KNeighborsClassifier(n_neighbors=20, metric="cosine", weights=lambda d: np.exp((1 - d) / t))
    expected = sk.fit(bank, labels).predict(queries)
    ours = weighted_knn_predict(torch.from_numpy(bank), torch.from_numpy(labels), torch.from_numpy(queries),
                                k=20, temperature=t).numpy()
    assert (ours == expected).mean() >= 0.98  # ties in float rounding aside
