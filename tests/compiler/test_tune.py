"""The autotuner: spaces, their validity against the compiler, features against the simulator's counters,
the cost model, the tuners, logs, runners (local and Dask) and the command line.

Cycle counts come from the tiny config's RTL; one module fixture measures every valid point of a small
dense layer once (a few seconds on two workers) and the tuner tests replay against it.
"""

import dataclasses
import json
import os
import signal
import threading
import time

import numpy as np
import pytest

from tilewright.cli import main
from tilewright.compiler.ops import Conv2dSpec, DenseSpec, conv_space, conv_tiles, dense_space, dense_tiles
from tilewright.compiler.schedule import ScheduleError
from tilewright.compiler.tune import (FEATURES, CostModel, DaskRunner, GATuner, LayerSpecError, LocalRunner,
                                      RandomTuner, RunnerError, Task, TuningLog, TuningLogError, XGBTuner, design_hash,
                                      features, measure, parse_layer, tune)
from tilewright.compiler.tune.task import dram_bytes
from tilewright.fpga.boards import get_board
from tilewright.runtime.bench import RESNET18
from tilewright.runtime.device import get_device
from tilewright.sim.fast import DramTiming

from tests.models import small_resnet

TASK = ("dense:4,32,16", "tiny")


def _spearman(a, b):
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


@pytest.fixture(scope="module")
def exhaustive(tmp_path_factory):
    """Every valid point of :data:`TASK` measured on the RTL: ``(task, log, design)``."""
    task = parse_layer(*TASK)
    log = TuningLog(tmp_path_factory.mktemp("tune") / "exhaustive.jsonl")
    with LocalRunner(2) as runner:
        tune(task, trials=len(task.space().valid()), tuner="random", runner=runner, log=log)
    return task, log, design_hash(task.config)


# -- spaces -------------------------------------------------------------------------------------------

def test_space_index_and_point_are_inverse_and_the_hash_names_the_knobs():
    space = conv_space(Conv2dSpec(1, 16, 8, 8, 16, (3, 3), 1, 1), "tiny")
    assert [space.index(space.point(i)) for i in range(len(space))] == list(range(len(space)))
    assert len(space) == np.prod([len(k.values) for k in space.knobs])
    assert space.hash == conv_space(Conv2dSpec(1, 16, 8, 8, 16, (3, 3), 1, 1), "tiny").hash
    assert space.hash != conv_space(Conv2dSpec(1, 16, 8, 8, 32, (3, 3), 1, 1), "tiny").hash
    with pytest.raises(ValueError, match="rows=5"):
        space.index(dict(space.point(0), rows=5))
    with pytest.raises(IndexError):
        space.point(len(space))


@pytest.mark.parametrize("config", ["default", "small"])
def test_the_heuristic_schedule_is_a_valid_point_of_every_resnet18_space(config):
    for _, hw, cin, cout, k, s in RESNET18:
        spec = Conv2dSpec(1, cin, hw, hw, cout, (k, k), s, 1 if k == 3 else 0)
        space = conv_space(spec, config)
        assert space.index(dataclasses.asdict(conv_tiles(spec, config))) in space.valid()
    spec = DenseSpec(16, 512, 1024)
    space = dense_space(spec, config)
    assert space.index(dataclasses.asdict(dense_tiles(spec, config))) in space.valid()


@pytest.mark.parametrize("layer", ["conv2d:1,16,8,8,16,3,1,1", "conv2d:2,16,12,12,16,1,2,0", "dense:8,64,32"])
def test_valid_points_compile_and_overfilling_points_are_refused_by_the_compiler(layer):
    """The space's validity is the compiler's: its valid points build; a point it rejects for overfilling
    the inp, wgt or acc buffer is rejected by the compiler's storage planning too. (The micro-op limit is
    the schedule's own: half the buffer, so the next kernel loads while one runs.)"""
    task = parse_layer(layer, "tiny")
    space, rng = task.space(), np.random.default_rng(0)
    valid = space.valid()
    for i in rng.choice(valid, size=min(12, len(valid)), replace=False):
        task.program(space.point(int(i)))
    problems = {i: space.problem(space.point(i)) or "" for i in range(len(space))}
    overfilled = [i for i, p in problems.items() if "overfilled" in p and "uop" not in p]
    assert overfilled
    for i in rng.choice(overfilled, size=min(6, len(overfilled)), replace=False):
        with pytest.raises(ScheduleError, match="bytes"):
            task.program(space.point(int(i)))


# -- features -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("layer,config", [
    ("conv2d:1,16,8,8,16,3,1,1", "tiny"), ("conv2d:2,8,6,6,8,1,2,0", "tiny"), ("conv2d:1,16,9,9,16,3,2,0", "tiny"),
    ("dense:8,64,32", "tiny"), ("conv2d:1,16,7,7,16,3,2,1", "small")])
def test_dram_bytes_per_memory_type_are_what_the_simulator_counts(layer, config):
    """The features describe the program: the DRAM bytes per memory type the model is given equal those
    the functional simulator counts running the program, for every sampled point."""
    _assert_dram_bytes_are_counted(parse_layer(layer, config), samples=15)


def _assert_dram_bytes_are_counted(task, samples):
    """dram_bytes of ``samples`` valid points of ``task`` equal the bytes fsim counts running them."""
    space, device = task.space(), get_device("fsim", task.config)
    inputs = task.inputs()
    for i in space.valid()[::max(1, len(space.valid()) // samples)]:
        point = space.point(i)
        _, stats = device.run_program(task.program(point), inputs)
        counted = {m: stats["bytes_read_by_type"][m] for m in ("inp", "wgt", "acc")}
        counted["acc"] += stats["bytes_read_by_type"].get("acc8", 0)     # (a residual, int8 into the accumulators)
        assert dram_bytes(task, point) == dict(counted, out=stats["dram_bytes_written"]), point


def test_features_are_finite_and_as_long_as_their_names():
    for layer in ("conv2d:1,16,8,8,16,3,1,1", "dense:8,64,32"):
        task = parse_layer(layer, "tiny")
        rows = np.array([features(task, task.space().point(i)) for i in task.space().valid()])
        assert rows.shape[1] == len(FEATURES) and np.isfinite(rows).all()
        assert rows.std(axis=0).max() > 0


# -- the cost model -----------------------------------------------------------------------------------

@pytest.mark.parametrize("objective", ["rank", "reg"])
def test_the_cost_model_ranks_points_it_was_not_trained_on(exhaustive, objective):
    task, log, design = exhaustive
    records = [r for r in log.task_records(task, design) if r["cycles"]]
    rng = np.random.default_rng(1)
    order = rng.permutation(len(records))
    train, test = [records[k] for k in order[:len(order) // 2]], [records[k] for k in order[len(order) // 2:]]
    model = CostModel(objective).fit([features(task, r["knobs"]) for r in train], [r["cycles"] for r in train],
                                     [task.key] * len(train))
    scores = model.predict([features(task, r["knobs"]) for r in test])
    # higher scores for fewer cycles
    assert _spearman(scores, [-r["cycles"] for r in test]) > 0.7


def test_the_cost_model_refuses_an_unknown_objective_and_predicting_untrained():
    with pytest.raises(ValueError, match="objective"):
        CostModel("mse")
    with pytest.raises(RuntimeError, match="not trained"):
        CostModel().predict([[0.0] * len(FEATURES)])


# -- tuners -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("tuner", [XGBTuner, RandomTuner, GATuner])
def test_tuners_propose_each_valid_point_once(exhaustive, tuner):
    task, log, design = exhaustive
    valid = task.space().valid()
    proposer = tuner(task, seed=3)
    seen = []
    while True:
        batch = proposer.next_batch(8)
        if not batch:
            break
        assert set(batch) <= set(valid) and not set(batch) & set(seen)
        seen += batch
        proposer.update(batch, [log.lookup(task, design, task.space().point(i))["cycles"] for i in batch])
    assert sorted(seen) == valid


def test_tuning_never_ends_worse_than_the_heuristic_and_resumes_from_its_log(exhaustive, tmp_path):
    task, log, design = exhaustive
    for seed in range(3):
        result = tune(task, trials=3, tuner="random", log=TuningLog(), design=design, seed=seed,
                      measure_fn=log.replay(design))
        assert result.best["cycles"] <= result.default["cycles"] and result.speedup >= 1
    resumed = TuningLog(tmp_path / "resumed.jsonl")
    first = tune(task, trials=10, log=resumed, design=design, measure_fn=log.replay(design))
    second = tune(task, trials=30, log=TuningLog(tmp_path / "resumed.jsonl"), design=design,
                  measure_fn=log.replay(design))
    assert (first.measured, second.cached, second.measured) == (10, 10, 20)
    assert len(TuningLog(tmp_path / "resumed.jsonl").records) == 30


def test_xgb_with_earlier_logs_of_other_tasks_starts_from_a_trained_model(exhaustive):
    task, log, _ = exhaustive
    other = Task("dense", DenseSpec(4, 64, 16), "tiny")
    cold = XGBTuner(other, seed=0)
    warm = XGBTuner(other, seed=0, history=log.records)
    assert not cold.model.trained and warm.model.trained
    # its first batch is the model's choice, not a random one: their predicted scores are the best ones
    batch = warm.next_batch(4)
    scores = dict(zip(other.space().valid(), warm.model.predict([features(other, other.space().point(i))
                                                                 for i in other.space().valid()])))
    assert np.mean([scores[i] for i in batch]) > np.quantile(list(scores.values()), 0.75)


# -- logs ---------------------------------------------------------------------------------------------

def test_a_tuning_log_round_trips_caches_and_forgives_only_a_torn_last_line(exhaustive, tmp_path):
    task, log, design = exhaustive
    path = tmp_path / "log.jsonl"
    copy = TuningLog(path)
    for record in log.records[:5]:
        copy.append(task, design, record["space"], {k: record[k] for k in ("knobs", "cycles", "error", "seconds")},
                    "test")
    again = TuningLog(path)
    assert [r["cycles"] for r in again.records] == [r["cycles"] for r in log.records[:5]]
    assert again.lookup(task, design, log.records[0]["knobs"])["cycles"] == log.records[0]["cycles"]
    assert {"task", "fingerprint", "design", "space", "knobs", "cycles", "error", "timestamp", "tool"} <= set(
        again.records[0])
    with open(path, "a") as f:
        f.write('{"schema": 1, "task": "dense:')          # a kill mid-write
    resumed = TuningLog(path)
    assert len(resumed.records) == 5
    record = log.records[5]
    resumed.append(task, design, record["space"], {k: record[k] for k in ("knobs", "cycles", "error", "seconds")},
                   "test")
    assert len(TuningLog(path).records) == 6       # (the fragment is gone: the new record has a line of its own)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "not json"] + lines[1:]) + "\n")
    with pytest.raises(TuningLogError, match=":2: not a schema-1 tuning record"):
        TuningLog(path)


# -- runners ------------------------------------------------------------------------------------------

def test_measurement_records_refused_points_instead_of_raising():
    task = parse_layer("conv2d:2,16,12,12,16,1,2,0", "tiny")
    space = task.space()
    bad = next(space.point(i) for i in range(len(space)) if "inp " in (space.problem(space.point(i)) or ""))
    (result,) = measure(task, [bad])
    assert result["cycles"] is None and result["error"].startswith("StorageError") and "the inp buffer needs" in result["error"]


def test_dask_measures_what_the_local_runner_measures_and_survives_a_killed_worker(exhaustive, tmp_path):
    """Two Dask workers (a LocalCluster) measure the same cycles as the local processes did; killing a
    worker mid-run loses no finished result: the run goes on, every point ends up in the log."""
    task, log, design = exhaustive
    points = [task.space().point(i) for i in task.space().valid()[:16]]
    fresh = TuningLog(tmp_path / "dask.jsonl")
    with DaskRunner(workers=2) as runner:
        assert runner.parallelism == 2
        pids = list(runner.client.run(os.getpid).values())
        killed = threading.Event()

        def progress(done, total, best, rate):
            if done == 3 and not killed.is_set():
                killed.set()
                os.kill(pids[0], signal.SIGKILL)

        result = tune(task, trials=16, tuner=RandomTuner(task, seed=5), runner=runner, log=fresh, design=design,
                      progress=progress, include_default=False)
    assert killed.is_set() and result.measured == 16
    records = TuningLog(tmp_path / "dask.jsonl").records
    assert len(records) == len({json.dumps(r["knobs"], sort_keys=True) for r in records}) >= 14
    for r in records:
        assert r["cycles"] == log.lookup(task, design, r["knobs"])["cycles"]
    assert all(log.lookup(task, design, p) for p in points)


def test_a_task_on_a_board_memory_is_measured_and_logged_as_its_own(exhaustive, tmp_path):
    """Measured with the ULX3S's SDRAM as the RTL's DRAM, a memory-bound dense layer takes more cycles than with
    a bus beat a cycle; its records hold the timing and a design hash of their own, read back as the same
    task, and each memory's best schedule comes from its own records only."""
    task, log, design = exhaustive
    memory = get_board("ulx3s-85f").dram_timing(50)
    slow = dataclasses.replace(task, memory=memory)
    assert design_hash(task.config, memory) != design and slow.key == task.key
    assert dataclasses.replace(task, memory=DramTiming()) == task      # (the default, spelt out, is no memory)
    both = TuningLog(tmp_path / "both.jsonl", records=log.records)
    result = tune(slow, trials=4, tuner=RandomTuner(slow, seed=3), log=both)
    assert result.measured == 4
    records = TuningLog(tmp_path / "both.jsonl").records
    # (as records from before `one_burst` kept it: the SDRAM's fields alone)
    sdram = {"latency": memory.latency, "bytes_per_cycle": memory.bytes_per_cycle}
    assert len(records) == 4 and all(r["memory"] == sdram for r in records)
    assert Task.from_json(records[0]) == slow
    for r in records:
        assert r["cycles"] > log.lookup(task, design, r["knobs"])["cycles"]
    best_slow, _ = both.best_schedule(slow)
    best_fast, _ = both.best_schedule(task)
    assert best_slow in records and best_slow["cycles"] == min(r["cycles"] for r in records)
    assert "memory" not in best_fast and best_fast["cycles"] == min(r["cycles"] for r in log.records)


def test_a_dask_cluster_left_without_workers_is_an_error_not_a_hang():
    """Jobs waiting on a cluster that has lost every worker end in RunnerError once it has had none for the
    runner's patience, instead of waiting for ever."""
    with DaskRunner(workers=1) as runner:
        runner.PATIENCE = 2
        runner.client.retire_workers(close_workers=True)
        deadline = time.monotonic() + 30
        while runner.client.scheduler_info().get("workers"):
            assert time.monotonic() < deadline, "a retired worker came back"
            time.sleep(0.2)
        future = runner.submit(sum, [1, 2])
        with pytest.raises(RunnerError, match="no worker for 2 s"):
            runner.wait_any([future])


# -- command line -------------------------------------------------------------------------------------

def test_tune_layers_then_compile_a_model_with_the_log(tmp_path, capsys):
    """``tilewright tune MODEL`` tunes each accelerator layer, a second run takes the results from the log,
    and ``compile --tuning-log`` takes every layer's best schedule from it."""
    model_path = tmp_path / "resnet.onnx"
    model_path.write_bytes(small_resnet().SerializeToString())
    log = tmp_path / "t.jsonl"
    assert main(["tune", str(model_path), "--config", "tiny", "--trials", "3", "--log", str(log),
                 "--workers", "2"]) == 0
    out = capsys.readouterr().out
    layers = out.count("  best ")
    assert layers >= 3 and "heuristic" in out
    assert main(["tune", str(model_path), "--config", "tiny", "--trials", "3", "--log", str(log),
                 "--workers", "1"]) == 0
    assert capsys.readouterr().out.count("0 measured, 3 from the log") == layers
    twm = tmp_path / "m.twm"
    assert main(["compile", str(model_path), "--config", "tiny", "--tuning-log", str(log), "-o", str(twm)]) == 0
    out = capsys.readouterr().out
    assert f"{layers} tuned" in out and "0 heuristic" in out


@pytest.mark.parametrize("argv,message", [
    (["tune", "--layer", "conv2d:1,2,3", "--config", "tiny"], "give conv2d:N,C,H,W,O,K,S,P"),
    (["tune", "--layer", "conv2d:1,8,2,2,8,3,1,0", "--config", "tiny"], "does not fit"),
    (["tune", "--config", "tiny"], "give a model or --layer"),
    (["tune", "nosuch.onnx", "--config", "tiny"], "no such file"),
    (["tune", "--layer", "C2", "--config", "tiny", "--scheduler", "tcp://127.0.0.1:9"], "cannot reach the Dask"),
    (["compile", "nosuch.onnx", "--config", "tiny", "--tuning-log", "nosuch.jsonl", "-o", "x.twm"], "nosuch"),
    (["compile", "m.onnx", "--config", "tiny", "--memory", "ulx3s-85f", "-o", "x.twm"], "give --tuning-log too"),
    (["tune", "--layer", "C2", "--config", "tiny", "--memory", "ulx3s-85f@150"], "up to 143 MHz, not 150"),
])
def test_bad_tuning_input_is_one_line(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_layer_specs_parse_with_channels_rounded_to_the_blocks():
    task = parse_layer("conv2d:1,3,8,8,5,3,1,1", "tiny")
    assert (task.spec.in_channels, task.spec.out_channels) == (4, 8)
    assert parse_layer("C2", "default").spec.in_channels == 64
    with pytest.raises(LayerSpecError):
        parse_layer("conv2d:1,8,8,8,8,0,1,1", "tiny")


class _FlakyRunner:
    """Runs measurements in this process; the futures of every ``every``-th submission fail as a dead worker's."""

    parallelism = 2

    def __init__(self, measure_fn, every):
        self.measure_fn, self.every, self.count = measure_fn, every, 0

    def submit(self, fn, *args):
        import concurrent.futures
        self.count += 1
        future = concurrent.futures.Future()
        if self.count % self.every == 0:
            future.set_exception(RuntimeError("worker died"))
        else:
            future.set_result(self.measure_fn(*args))
        return future

    @staticmethod
    def wait_any(futures):
        return futures


class _ShuffledRunner:
    """Measurements in this process that finish in a random order, a random number at a time, as on workers."""

    parallelism = 3

    def __init__(self, measure_fn, seed):
        self.measure_fn, self.rng = measure_fn, np.random.default_rng(seed)
        self.calls = {}

    def submit(self, fn, *args):
        import concurrent.futures
        future = concurrent.futures.Future()
        self.calls[future] = args
        return future

    def wait_any(self, futures):
        done = [futures[k] for k in self.rng.permutation(len(futures))[:self.rng.integers(1, len(futures) + 1)]]
        for future in done:
            future.set_result(self.measure_fn(*self.calls.pop(future)))
        return done


def test_batches_in_step_measure_the_same_points_whatever_order_they_finish_in(exhaustive):
    """With ``sync`` the tuner learns each batch whole, in the order it proposed it: whatever order the points
    finish in (three shuffles here), the same points are measured in the same order. (Without it they are
    not.)"""
    task, log, design = exhaustive
    runs = []
    for order in range(3):
        fresh = TuningLog()
        tune(task, trials=18, runner=_ShuffledRunner(log.replay(design), order), log=fresh,
             design=design, seed=4, batch=6, sync=True)
        runs.append([r["knobs"] for r in fresh.records])
    assert len(runs[0]) == 18 and runs[0] == runs[1] == runs[2]


def test_a_lost_worker_costs_its_point_only_and_is_neither_logged_nor_learnt(exhaustive):
    task, log, design = exhaustive
    fresh = TuningLog()
    result = tune(task, trials=20, tuner="random", runner=_FlakyRunner(log.replay(design), every=4), log=fresh,
                  design=design, seed=2, include_default=False)
    assert result.failed == 5 and len(fresh.records) == 15 and all(r["cycles"] for r in fresh.records)
    assert "worker lost" in result.first_error and result.best["cycles"] == min(r["cycles"] for r in fresh.records)
    every_time = tune(task, trials=4, tuner="random", runner=_FlakyRunner(log.replay(design), every=1),
                      log=TuningLog(), design=design, include_default=False)
    assert every_time.best is None and "worker died" in every_time.first_error


@pytest.mark.parametrize("spec", [Conv2dSpec(2, 16, 8, 8, 32, (1, 1), 2, 0, residual=True, residual_scale=True),
                                  Conv2dSpec(1, 16, 8, 8, 32, (3, 3), 1, 1, residual=True, residual_scale=True,
                                             scale=True),
                                  Conv2dSpec(1, 16, 6, 6, 16, (3, 3), 1, 1, residual=True, residual_mul=3,
                                             residual_shift=2)])
def test_residual_tasks_count_their_dram_bytes_as_the_simulator_does(spec):
    """A residual layer's bytes: the residual itself, and its per-channel scale with the bias and scale
    (resident or per tile)."""
    _assert_dram_bytes_are_counted(Task("conv2d", spec, "tiny"), samples=15)


@pytest.mark.parametrize("spec", [Conv2dSpec(1, 16, 8, 8, 16, (3, 3), 1, 1, group_channels=1),
                                  Conv2dSpec(2, 12, 9, 9, 12, (3, 3), 2, 1, group_channels=2)])
def test_grouped_tasks_count_their_dram_bytes_as_the_simulator_does(spec):
    """A depthwise or grouped layer's space: one reduction block; each channel tile reads its own input blocks."""
    from tilewright.compiler.tune.task import Task
    task = Task("conv2d", spec, "tiny")
    assert {task.space().point(i)["in_channels"] for i in task.space().valid()} == {1}
    _assert_dram_bytes_are_counted(task, samples=10)
