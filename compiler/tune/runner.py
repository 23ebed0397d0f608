"""Where measurements run, behind one futures interface.

A runner has ``parallelism`` (how many measurements run at once),
``submit(fn, *args, **kwargs)`` returning a future (``.result()``) and
``wait_any(futures)`` (the done ones, after waiting for one). :class:`LocalRunner` is a pool of worker
processes on this machine (``concurrent.futures``); :class:`DaskRunner`
sends the same calls to a Dask ``distributed`` cluster: a scheduler's
address for a real cluster of machines, or a ``LocalCluster`` it starts
itself. Each worker process keeps its Verilated models between calls.
"""

import concurrent.futures
import multiprocessing
import os
import time

__all__ = ["LocalRunner", "DaskRunner", "make_runner", "RunnerError"]


class RunnerError(RuntimeError):
    """A runner that cannot start (a scheduler that does not answer, say), or a Dask cluster left without
    workers while jobs wait."""


class LocalRunner:
    """``workers`` processes on this machine (default: one per core)."""

    def __init__(self, workers=None):
        self.parallelism = max(1, workers or os.cpu_count() or 1)
        self._pool = self._start()

    def _start(self):
        # (spawned, not forked: the parent may hold threads and a harness subprocess of its own)
        return concurrent.futures.ProcessPoolExecutor(self.parallelism, mp_context=multiprocessing.get_context("spawn"))

    def submit(self, fn, *args, **kwargs):
        try:
            return self._pool.submit(fn, *args, **kwargs)
        except concurrent.futures.process.BrokenProcessPool:      # a worker died: its futures say so; go on
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = self._start()
            return self._pool.submit(fn, *args, **kwargs)

    @staticmethod
    def wait_any(futures):
        """The done ones of ``futures``, after waiting for at least one."""
        return concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_COMPLETED).done

    def describe(self):
        return f"{self.parallelism} local process{'es' if self.parallelism > 1 else ''}"

    def close(self):
        self._pool.shutdown(cancel_futures=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class DaskRunner:
    """A Dask ``distributed`` cluster: ``scheduler`` (``tcp://HOST:8786``) or a ``LocalCluster`` of ``workers``
    single-threaded processes. Workers need Tilewright installed (the same version) and a C++ compiler."""

    #: Seconds a cluster may have no worker while jobs wait before :meth:`wait_any` gives up.
    PATIENCE = 120

    def __init__(self, scheduler=None, workers=None, timeout=10):
        from distributed import Client, LocalCluster
        self._cluster = None
        try:
            if scheduler:
                self._client = Client(scheduler, timeout=timeout)
            else:
                self._cluster = LocalCluster(n_workers=max(1, workers or os.cpu_count() or 1), threads_per_worker=1,
                                             processes=True, dashboard_address=None)
                self._client = Client(self._cluster)
        except (OSError, TimeoutError) as e:
            if self._cluster is not None:
                self._cluster.close()
            raise RunnerError(f"cannot reach the Dask scheduler at {scheduler}: {e}" if scheduler else
                              f"cannot start a Dask LocalCluster: {e}") from None
        self._scheduler = scheduler

    @property
    def client(self):
        """The ``distributed.Client``."""
        return self._client

    @property
    def parallelism(self):
        threads = self._client.nthreads()
        return max(1, sum(threads.values()))

    def submit(self, fn, *args, **kwargs):
        # pure=False: the same candidates submitted twice (a retry) are measured twice, not deduplicated
        return self._client.submit(fn, *args, pure=False, **kwargs)

    def wait_any(self, futures):
        """The done ones of ``futures``, after waiting for at least one; RunnerError when the cluster has had no
        worker for :attr:`PATIENCE` seconds (its jobs would wait for ever)."""
        from distributed import wait
        alone_since = None
        while True:
            try:
                return wait(futures, timeout=5, return_when="FIRST_COMPLETED").done
            except TimeoutError:
                if self._client.scheduler_info().get("workers"):
                    alone_since = None
                elif alone_since is None:
                    alone_since = time.monotonic()
                elif time.monotonic() - alone_since > self.PATIENCE:
                    raise RunnerError(f"the Dask cluster has had no worker for {self.PATIENCE} s; its jobs are "
                                      f"lost (start workers and run again)") from None

    def describe(self):
        where = f"scheduler {self._scheduler}" if self._scheduler else "a local Dask cluster"
        return f"{self.parallelism} Dask worker thread(s) on {where}"

    def close(self):
        self._client.close()
        if self._cluster is not None:
            self._cluster.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def make_runner(scheduler=None, workers=None, dask=False):
    """A :class:`DaskRunner` for ``scheduler`` (or a LocalCluster when ``dask``), else a :class:`LocalRunner`."""
    if scheduler or dask:
        return DaskRunner(scheduler, workers)
    return LocalRunner(workers)
