"""The cost model: XGBoost with a pairwise ranking objective over schedule features. It learns
an order, not cycle counts: which of two schedules of a layer is faster. Trained on every
measurement so far (and, to warm-start a new layer, on other layers' records, each layer its
own ranking group)."""

from __future__ import annotations

import numpy as np

from tilecraft.errors import TilecraftError


def _xgboost():
    try:
        import xgboost
    except ImportError:
        raise TilecraftError(
            "the tuner's cost model needs xgboost: pip install 'tilecraft[tune]'"
        ) from None
    return xgboost


class CostModel:
    def __init__(self, seed: int = 0, rounds: int = 60):
        self.seed, self.rounds = seed, rounds
        self._booster = None

    @property
    def trained(self) -> bool:
        return self._booster is not None

    def fit(self, groups: list[tuple[np.ndarray, np.ndarray]]) -> None:
        """Train on (features, cycles) per layer: within a layer, fewer cycles rank higher."""
        xgb = _xgboost()
        xs, labels, sizes = [], [], []
        for x, cycles in groups:
            if len(cycles) < 2:
                continue
            order = np.argsort(np.argsort(-np.asarray(cycles, np.float64)))  # 0 = slowest
            xs.append(x)
            labels.append(order * 31.0 / max(len(cycles) - 1, 1))  # relevance 0..31
            sizes.append(len(cycles))
        if not xs:
            return
        data = xgb.DMatrix(np.vstack(xs), label=np.concatenate(labels))
        data.set_group(sizes)
        params = {
            "objective": "rank:pairwise",
            "eta": 0.2,
            "max_depth": 6,
            "min_child_weight": 1,
            "subsample": 0.9,
            "seed": self.seed,
            "nthread": 1,
            "verbosity": 0,
        }
        self._booster = xgb.train(params, data, num_boost_round=self.rounds)

    def score(self, x: np.ndarray) -> np.ndarray:
        """Higher is predicted faster."""
        if self._booster is None:
            return np.zeros(len(x))
        return self._booster.predict(_xgboost().DMatrix(x))
