"""The learned cost model: XGBoost on program features, trained on measured cycles.

Scores only need to order the points of one task, so labels are relative
to each task: a point's normalised throughput ``best cycles of its task /
its cycles`` (1 for the best, near 0 for slow ones, 0 for a failed point).
Two objectives over the same features:

* ``"rank"`` (pairwise ranking, one query group per task): learns which of
  two points of a task is faster, whatever the task's scale;
* ``"reg"`` (squared error on the normalised throughput, weighted by it as
  Ansor does, so the fast points count most).

``benchmarks/tuning.py`` measures both; docs/tuning.md gives the numbers
behind the default.
"""

import numpy as np

__all__ = ["CostModel", "OBJECTIVES"]

OBJECTIVES = {"rank": "rank:pairwise", "reg": "reg:squarederror"}

#: Relevance grades for the ranking objective: a task's points are graded 0..GRADES by throughput.
GRADES = 31


class CostModel:
    """``fit`` on (features, cycles or None, task group) rows; ``predict`` scores (higher is faster)."""

    def __init__(self, objective="rank", *, rounds=60, max_depth=6, seed=0):
        if objective not in OBJECTIVES:
            raise ValueError(f"objective {objective!r}: choose {' or '.join(OBJECTIVES)}")
        self.objective, self.rounds, self.seed = objective, rounds, seed
        self.params = {"objective": OBJECTIVES[objective], "max_depth": max_depth, "eta": 0.3, "gamma": 1e-4,
                       "min_child_weight": 1, "seed": seed, "nthread": 1, "verbosity": 0}
        self._booster = None

    @property
    def trained(self):
        return self._booster is not None

    def fit(self, features, cycles, groups, weights=None):
        """Train on rows of ``features`` with their measured ``cycles`` (None: the point failed), grouped by
        task (``groups``: one hashable per row). ``weights`` scale rows (down-weighting other tasks' logs)."""
        import xgboost
        x = np.asarray(features, dtype=np.float32)
        groups = list(groups)
        throughput = np.zeros(len(x), dtype=np.float32)
        for g in set(groups):
            rows = [k for k, gg in enumerate(groups) if gg == g]
            measured = [cycles[k] for k in rows if cycles[k]]
            if measured:
                best = min(measured)
                for k in rows:
                    throughput[k] = best / cycles[k] if cycles[k] else 0.0
        order = sorted(range(len(x)), key=lambda k: str(groups[k]))       # (ranking wants each group contiguous)
        x, throughput, groups = x[order], throughput[order], [groups[k] for k in order]
        w = np.ones(len(x), dtype=np.float32) if weights is None else np.asarray(weights, dtype=np.float32)[order]
        if self.objective == "rank":
            data = xgboost.DMatrix(x, label=np.round(throughput * GRADES))
            sizes, previous = [], object()
            for g in groups:
                if g != previous:
                    sizes.append(0)
                    previous = g
                sizes[-1] += 1
            data.set_group(sizes)
            # (ranking weights are per group: a task's records weigh as its first row says)
            starts = np.cumsum([0] + sizes[:-1])
            data.set_weight(w[starts])
        else:
            data = xgboost.DMatrix(x, label=throughput, weight=w * np.maximum(throughput, 0.05))
        self._booster = xgboost.train(self.params, data, self.rounds)
        return self

    def predict(self, features):
        """Scores of rows of ``features``: higher predicts fewer cycles (comparable within one task)."""
        if self._booster is None:
            raise RuntimeError("the cost model is not trained yet")
        return self._booster.inplace_predict(np.asarray(features, dtype=np.float32))
