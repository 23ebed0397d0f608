"""Tuners (which points to measure next) and the loop that measures them.

Every tuner proposes batches of unmeasured valid points of one task
(``next_batch``) and hears their cycles back (``update``):

* :class:`RandomTuner`: the valid points in a random order;
* :class:`GATuner`: a genetic algorithm (fitness = 1 / cycles, elitism,
  uniform crossover per knob, per-knob mutation);
* :class:`XGBTuner`: AutoTVM's loop. A :class:`~.model.CostModel` is fitted
  to everything measured so far (and to earlier logs of other tasks, for a
  head start), simulated annealing over the space finds the points it
  predicts fastest, and a fraction ε of each batch is random
  (exploration).

:func:`tune` runs a tuner against a runner and a tuning log: points
already in the log are not measured again, results are logged as they
arrive, and the best point is returned.
"""

import itertools
import json
import time

import numpy as np

from .log import TuningLog
from .measure import design_hash, measure
from .model import CostModel
from .task import FEATURES, Task, features

__all__ = ["RandomTuner", "GATuner", "XGBTuner", "TUNERS", "tune", "TuneResult"]


class _Tuner:
    """``propose(n)``: up to ``n`` valid points not measured or being measured; ``update``: their cycles."""
    name = None

    def __init__(self, task, *, seed=0):
        self.task, self.space = task, task.space()
        self.valid = self.space.valid()
        self.rng = np.random.default_rng(seed)
        self.measured = {}                 # index -> cycles (None: failed)
        self.in_flight = set()             # proposed, not yet updated

    def propose(self, n):
        batch = self.next_batch(n)
        self.in_flight.update(batch)
        return batch

    def update(self, indices, cycles):
        self.measured.update(zip(indices, cycles))
        self.in_flight.difference_update(indices)

    def _taken(self, i):
        return i in self.measured or i in self.in_flight

    def _unmeasured(self):
        return [i for i in self.valid if not self._taken(i)]

    def _random(self, n, exclude=()):
        left = [i for i in self._unmeasured() if i not in exclude]
        picks = self.rng.choice(len(left), size=min(n, len(left)), replace=False) if left else []
        return [left[k] for k in picks]


class RandomTuner(_Tuner):
    """Valid points in random order."""
    name = "random"

    def next_batch(self, n):
        return self._random(n)


class GATuner(_Tuner):
    """A genetic algorithm over the knobs: ``population`` points a generation, the ``elite`` best kept."""
    name = "ga"

    def __init__(self, task, *, seed=0, population=32, elite=4, mutation=0.1):
        super().__init__(task, seed=seed)
        self.population, self.elite, self.mutation = population, elite, mutation
        self.pending = self._random(population)

    def _child(self, a, b):
        pa, pb = self.space.point(a), self.space.point(b)
        child = {k: (pa[k] if self.rng.random() < 0.5 else pb[k]) for k in pa}
        for knob in self.space.knobs:
            if self.rng.random() < self.mutation:
                child[knob.name] = knob.values[self.rng.integers(len(knob.values))]
        return None if self.space.problem(child) else self.space.index(child)

    def _next_generation(self):
        scored = sorted((c, i) for i, c in self.measured.items() if c)
        if not scored:
            return self._random(self.population)
        fitness = np.array([1.0 / c for c, _ in scored])
        weights = fitness / fitness.sum()
        generation = set()
        for _ in range(self.population * 20):
            if len(generation) >= self.population:
                break
            a, b = (scored[k][1] for k in self.rng.choice(len(scored), size=2, p=weights))
            child = self._child(a, b)
            if child is not None and not self._taken(child):
                generation.add(child)
        generation = list(generation)
        return generation + self._random(self.population - len(generation), exclude=set(generation))

    def next_batch(self, n):
        batch = []
        while len(batch) < n:
            if not self.pending:
                self.pending = [i for i in self._next_generation() if i not in batch]
                if not self.pending:
                    break
            i = self.pending.pop(0)
            if not self._taken(i) and i not in batch:
                batch.append(i)
        return batch


class XGBTuner(_Tuner):
    """Cost-model guided: an XGBoost model ranks points, simulated annealing searches its predictions.

    ``history``: records of earlier tuning logs (other tasks) to train on from the start, weighted
    ``history_weight`` against this task's own measurements. ``epsilon``: the random share of a batch.
    Until the model has data, points are ranked by the compiler's analytic estimate (``prior``) or
    drawn at random.
    """
    name = "xgb"
    SCORE_ALL = 20_000          # spaces up to this many valid points are scored whole after each fit

    def __init__(self, task, *, seed=0, objective="rank", epsilon=0.1, history=(), history_weight=0.3,
                 chains=64, steps=100, prior=True):
        super().__init__(task, seed=seed)
        self.prior = prior
        self.model = CostModel(objective, seed=seed)
        self.epsilon, self.chains, self.steps = epsilon, chains, steps
        self._features = {}
        self.history = [r for r in history if (r["task"], r["fingerprint"]) != (task.key, task.config.fingerprint)]
        self.history_weight = history_weight
        self._history_rows = None
        self._predicted = None
        self._stale = True          # new results since the last fit (refitted when points are next proposed)
        self._fit()

    def _feature(self, i):
        if i not in self._features:
            self._features[i] = features(self.task, self.space.point(i))
        return self._features[i]

    def _history(self):
        if self._history_rows is None:
            self._history_rows = [(_record_features(r), r["cycles"], (r["task"], r["fingerprint"]))
                                  for r in self.history]
        return self._history_rows

    def _fit(self):
        self._stale = False
        # (in index order: the model must not depend on the order results came back in)
        group = (self.task.key, self.task.config.fingerprint)
        own = [(self._feature(i), self.measured[i], group) for i in sorted(self.measured)]
        rows = self._history() + own
        if not any(cycles for _, cycles, _ in rows):
            return
        weights = [self.history_weight] * len(self._history()) + [1.0] * len(own)
        self.model.fit([f for f, _, _ in rows], [c for _, c, _ in rows], [g for _, _, g in rows], weights)
        self._predicted = None

    def update(self, indices, cycles):
        super().update(indices, cycles)
        self._stale = self._stale or bool(indices)

    def _scores(self, indices):
        """Predicted scores of ``indices``: the whole space is scored at once after each fit when it is
        small enough, else each point when annealing first reaches it."""
        if self._predicted is None:
            self._predicted = {}
            if len(self.valid) <= self.SCORE_ALL:
                self._predicted = dict(zip(self.valid, self.model.predict([self._feature(i) for i in self.valid])))
        new = [i for i in dict.fromkeys(indices) if i not in self._predicted]
        if new:
            self._predicted.update(zip(new, self.model.predict([self._feature(i) for i in new])))
        return np.array([self._predicted[i] for i in indices])

    def _anneal(self, n):
        """The ``n`` unmeasured points with the best predicted scores that parallel annealing chains find:
        each chain moves one knob at a time, to a better point or, with a probability that falls as the
        temperature does, to a worse one (AutoTVM's explorer)."""
        unmeasured = self._unmeasured()
        if len(unmeasured) <= n:
            return unmeasured
        chains = [unmeasured[k] for k in self.rng.choice(len(unmeasured), size=min(self.chains, len(unmeasured)),
                                                         replace=False)]
        scores = self._scores(chains)
        found = {i: s for i, s in zip(chains, scores)}
        scale = float(np.std(scores)) or 1.0
        for step in range(self.steps):
            temperature = max(1.0 - step / self.steps, 1e-3)
            moves = [self.space.neighbour(i, self.rng) for i in chains]
            new = self._scores(moves)
            found.update(zip(moves, new))
            accept = (new >= scores) | (self.rng.random(len(moves)) < np.exp(np.minimum((new - scores) / scale, 0)
                                                                               / temperature))
            chains = [m if a else c for m, c, a in zip(moves, chains, accept)]
            scores = np.where(accept, new, scores)
        return sorted((i for i in found if not self._taken(i)), key=lambda i: -found[i])[:n]

    def next_batch(self, n):
        if self._stale:
            self._fit()
        explore = int(round(self.epsilon * n))
        if self.model.trained:
            batch = self._anneal(n - explore)
        elif self.prior:
            estimate = FEATURES.index("estimate")
            batch = sorted(self._unmeasured(), key=lambda i: self._feature(i)[estimate])[:n - explore]
        else:
            batch = []
        return batch + self._random(n - len(batch), exclude=set(batch))


TUNERS = {t.name: t for t in (XGBTuner, RandomTuner, GATuner)}

_RECORD_FEATURES = {}      # (task, config fingerprint, memory, knobs) -> features, over every tuner of the process


def _record_features(record):
    """The features of a tuning record's point (cached: the same history seeds many tuners)."""
    key = (record["task"], record["fingerprint"], json.dumps(record.get("memory")),
           json.dumps(record["knobs"], sort_keys=True))
    if key not in _RECORD_FEATURES:
        _RECORD_FEATURES[key] = features(Task.from_json(record), record["knobs"])
    return _RECORD_FEATURES[key]


class TuneResult:
    """What one :func:`tune` run found: ``best`` (the log record of the fewest cycles, None if nothing
    ran), ``default`` (the heuristic's record), counts of points measured and taken from the log."""

    def __init__(self, task, best, default, measured, cached, failed, seconds, first_error=None):
        self.task, self.best, self.default = task, best, default
        self.measured, self.cached, self.failed, self.seconds = measured, cached, failed, seconds
        self.first_error = first_error      # (of a failed point or a lost worker: what to tell a user)

    @property
    def speedup(self):
        """Default cycles / best cycles (None when either is missing)."""
        if self.best and self.default and self.default["cycles"]:
            return self.default["cycles"] / self.best["cycles"]
        return None


def tune(task, *, trials, tuner="xgb", runner=None, log=None, batch=None, seed=0, design=None, progress=None,
         include_default=True, target=None, tuner_options=None, measure_fn=measure, sync=False):
    """Tune ``task`` until ``trials`` of its points are measured, choosing them with ``tuner`` (a name of
    :data:`TUNERS` or an instance).

    ``log`` (a :class:`TuningLog`) records every result as it arrives; the points it already holds for
    this task and design count as measured, so a run resumes where an earlier one stopped. ``runner``
    (default: this process) runs ``measure_fn`` (:func:`~.measure.measure`) on each point, up to ``batch``
    at a time (default: twice the runner's parallelism); whenever no more than half of them are left
    running, the tuner proposes more from all results so far. With ``sync`` it proposes a whole batch
    once the last is measured, and learns the batch's results in the order it proposed them: the points
    measured then depend on the seed and a ``batch`` given, not on how many workers measure them or which
    finishes first (at the cost of workers idle at each batch's end, and of a ``target`` reached in a
    batch waiting for the rest of it). With ``include_default`` the
    heuristic's point is measured first, so the best found is never slower than it. The run stops early
    once a point takes at most ``target`` cycles. ``progress(done, trials, best_cycles, measured_per_second)``
    is called after every point.
    """
    log = log if log is not None else TuningLog()
    design = design or design_hash(task.config, task.memory)
    space = task.space()
    if isinstance(tuner, str):
        tuner = TUNERS[tuner](task, seed=seed, **(tuner_options or {}))
    batch = batch or 2 * (runner.parallelism if runner else 1)
    default_index = space.index(task.default_point())
    started = time.perf_counter()
    counts = {"done": 0, "measured": 0, "cached": 0, "failed": 0}
    best = first_error = None

    def account(record, source):
        nonlocal best, first_error
        counts["done"] += 1
        counts[source] += 1
        if record["cycles"] is None:
            counts["failed"] += 1
            first_error = first_error or record["error"]
        elif best is None or record["cycles"] < best["cycles"]:
            best = record
        if progress:
            elapsed = time.perf_counter() - started
            progress(counts["done"], trials, best["cycles"] if best else None,
                     counts["measured"] / elapsed if elapsed else 0.0)

    known = {}
    for record in log.task_records(task, design):
        if record["space"] == space.hash:
            known[space.index(record["knobs"])] = record
    for record in known.values():
        account(record, "cached")
    tuner.update(list(known), [r["cycles"] for r in known.values()])

    # The queue stays full: whenever no more than half a batch is being measured, the tuner proposes
    # more (from everything measured so far), so no worker waits on a slow point. (In step, `sync`: a
    # batch at a time.)
    pending = {}                                    # future -> index
    arrived = []                                    # results not learnt yet: (index, result)
    proposed, order = {}, itertools.count()         # index -> when it was proposed

    def finished():
        return counts["done"] + len(pending) >= trials or (target and best and best["cycles"] <= target)

    first = include_default and default_index not in tuner.measured
    while True:
        if len(pending) <= (0 if sync else batch // 2) and not finished():
            room = min(batch - len(pending), trials - counts["done"] - len(pending))
            indices = tuner.propose(room - first)
            if first:
                indices = [default_index] + [i for i in indices if i != default_index]
                tuner.in_flight.add(default_index)
                first = False
            for i in indices:
                record = log.lookup(task, design, space.point(i), space.hash)
                if record is not None:
                    account(record, "cached")
                    tuner.update([i], [record["cycles"]])
                elif runner is None:
                    pending[_Done(measure_fn(task, [space.point(i)]))] = i
                else:
                    pending[runner.submit(measure_fn, task, [space.point(i)])] = i
                proposed[i] = next(order)          # (a point proposed again after a lost worker: later)
            if not indices and not pending:
                break               # (the whole valid space is measured)
            if not pending:
                continue
        if not pending:
            break
        for future in _wait_any(runner, list(pending)):
            i = pending.pop(future)
            arrived.append((i, _result(future, space.point(i))))
        if sync and pending:
            continue
        for i, result in sorted(arrived, key=lambda a: proposed[a[0]]) if sync else arrived:
            if result.get("lost"):      # (a dead worker says nothing of the point: not learnt, logged or cached)
                tuner.in_flight.discard(i)
                account(result, "measured")
            else:
                tuner.update([i], [result["cycles"]])
                account(log.append(task, design, space.hash, result, tuner.name), "measured")
        arrived = []
    default = log.lookup(task, design, space.point(default_index), space.hash)
    return TuneResult(task, best, default, counts["measured"], counts["cached"], counts["failed"],
                      time.perf_counter() - started, first_error)


class _Done:
    """A future that is already done (measurements made in this process)."""

    def __init__(self, value):
        self._value = value

    def result(self):
        return self._value


def _wait_any(runner, futures):
    """The futures of ``futures`` that are done, waiting for at least one."""
    if runner is None:
        return futures
    return runner.wait_any(futures)


def _result(future, point):
    """A future's measurement, or an error result when the worker itself died (the run goes on)."""
    try:
        return future.result()[0]
    except Exception as e:
        return {"knobs": point, "cycles": None, "error": f"worker lost: {type(e).__name__}: {e}"[:300], "seconds": 0.0,
                "lost": True}
