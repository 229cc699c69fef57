"""Statistics + gradient boosting: the CPU analogue of the paper's "LLM with statistics" rows.

Unlike every other model here it reads the whole series at full resolution (through summary
statistics), so it is a strong, not a budget-matched, baseline.
"""
from __future__ import annotations

import numpy as np


def series_features(x: np.ndarray, args: list[int], n_fine: int = 16) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    x = (x - x.mean()) / (x.std() + 1e-8)
    d1, d2 = np.diff(x), np.diff(x, 2)
    q = np.quantile(x, [0.05, 0.25, 0.5, 0.75, 0.95])
    feats = [x.min(), x.max(), q, [np.mean(np.abs(d1)), d1.std(), d2.std(), np.abs(d1).max(),
                                   np.mean(x[len(x) // 2:]) - np.mean(x[:len(x) // 2])]]
    parts = np.array_split(x, 4)
    feats.append([p.std() for p in parts] + [np.diff(p, 2).std() if len(p) > 2 else 0.0 for p in parts])
    fine = np.array_split(x, n_fine)
    hf = np.array([np.diff(p, 2).std() if len(p) > 2 else 0.0 for p in fine])
    feats.append(hf)
    a, b = (int(v) % n_fine for v in args)
    feats.append([hf[a], hf[b], hf[a] - hf[b]])   # the windows a question names
    spec = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(len(x))
    feats.append([freqs[np.argmax(spec[1:]) + 1], (spec * freqs).sum() / spec.sum()])
    return np.concatenate([np.ravel(np.asarray(f, dtype=float)) for f in feats])


def feature_matrix(series: np.ndarray, lengths: np.ndarray, args: list) -> np.ndarray:
    return np.stack([series_features(s[:int(n)], a) for s, n, a in zip(series, lengths, args)])


def fit_predict_gbm(train_x, train_y, test_x, seed: int, max_iter: int, lr: float) -> np.ndarray:
    from sklearn.ensemble import HistGradientBoostingClassifier

    clf = HistGradientBoostingClassifier(max_iter=max_iter, learning_rate=lr, random_state=seed)
    clf.fit(train_x, train_y)
    return clf.predict(test_x)
