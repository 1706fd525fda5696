"""The supervisor of the workers: starts them, restarts them when one dies, merges
their results (:class:`WorkerSupervisor`)."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from ..._clock import Clock
from ..._config import settings_of
from ..._deadletter import configured_path
from ..._errors import RuntimeFailure, StatestreamError
from ..._results import ErrorReport, RunResult, TaskMetrics, WorkerInfo
from ..._topology import Topology
from ..local.base import local_run_mode
from ..metrics import MetricsBank, MetricsSnapshot, SourceProgress, kinds_of
from ..plan import RuntimePlan, as_config, check_refusals
from ..session import StoreSession
from .mesh import PIPES, pipe
from .worker import EXIT_PEER_LOST, worker_main

log = logging.getLogger("statestream.workers")

#: Deaths of workers within ``_DEATH_WINDOW`` seconds that stop the run.
MAX_DEATHS = 5
_DEATH_WINDOW = 60.0


class WorkerSupervisor:
    """Runs a topology on ``topology.workers`` processes and restarts them when one dies.

    A :class:`~statestream.runtime.contract.Runtime`, as
    :class:`~statestream.runtime.local.LocalRuntime` is: ``open``, ``run``,
    ``stop``, ``close``, ``metrics``, ``counters``, ``worker_rows`` (one row
    per worker) and ``deadletter_path``.
    """

    deadletter_path: Path

    def __init__(
        self,
        topology: Topology,
        config: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.topology = topology
        conf = as_config(config, topology_prefixes=(topology.name,))
        settings = settings_of(conf)
        self.workers = settings.topology_workers
        if self.workers < 2:
            raise ValueError("WorkerSupervisor needs topology.workers >= 2")
        if (
            settings.topology_acker_executors == 1
            and conf.source_of("topology.acker.executors") == "defaults"
        ):
            # As Storm's default: one acker per worker, so that a tree's ledger
            # can live where its spout task does (see Worker.__init__).
            conf = conf.with_overrides(
                {"topology.acker.executors": self.workers}, source="topology.workers"
            )
        self.config = conf
        # What the plan refuses (make_runtime checks it too; tests and
        # statestream.testing build the supervisor directly).
        check_refusals(topology, conf)
        self.clock = clock
        self.plan = RuntimePlan(topology, self.config)
        # What a one-process run refuses at construction is refused here, and
        # the workers' dead-letter file is that of one process (from the config).
        self.exactly_once = local_run_mode(topology, self.config, self.plan)
        self.deadletter_path = configured_path(self.config)
        self.task_names = self.plan.task_names
        self.component_tasks = self.plan.component_tasks
        self.info = [WorkerInfo(i) for i in range(self.workers)]
        self.deaths: deque[float] = deque()
        self.restarts = 0
        self._stop = False
        self._procs: list[Any] = []
        self._past: list[TaskMetrics] = []
        self._past_counters: dict[str, int] = {}
        self._opened = False
        # The run's hold on its scope of the store (open), shared by the workers.
        self._store = StoreSession(topology, conf, clock)
        self._reported_at = [0.0] * self.workers  # when each worker's last progress came
        # The run's metrics bank: every worker's latest export merged (runtime.metrics).
        self.bank = MetricsBank(
            topology.name,
            "workers",
            kinds_of(topology),
            settings_of(conf).topology_stats_sample_rate,
        )
        self._sources: dict[int, list[SourceProgress]] = {}

    def open(self) -> None:
        """Claim the topology's scope of the store for the run, then re-partition stored
        state for changed parallelism, once, before any worker starts.

        The claim (``BackendStateProvider.claim``) is held until :meth:`run`
        ends; the workers, forked from this process, share it and never
        claim themselves. Raises StateLockedError if another run holds it.
        """
        if self._opened:
            return
        if self.topology.has_stateful_bolts:
            try:
                self._store.open()
            finally:
                self._store.disconnect()  # the workers open their own
        self._opened = True

    def stop(self) -> None:
        """Ask every worker to stop after its current round (safe from a signal handler)."""
        self._stop = True
        for p in self._procs:
            with contextlib.suppress(Exception):
                os.kill(p.pid, signal.SIGTERM)

    # -- observation -------------------------------------------------------------
    def task_metrics(self) -> list[TaskMetrics]:
        out = [TaskMetrics(m.component, m.task_index) for m in self._past]
        for m, p in zip(out, self._past, strict=True):
            m.add(p)
        for w in self.info:
            for m in w.metrics:
                c = TaskMetrics(m.component, m.task_index)
                c.add(m)
                out.append(c)
        return out

    def metrics(self) -> dict[str, TaskMetrics]:
        out: dict[str, TaskMetrics] = {}
        for m in self.task_metrics():
            out.setdefault(m.component, TaskMetrics(m.component, -1)).add(m)
        return out

    def counters(self) -> dict[str, int]:
        """The counters of the run so far: every worker's latest report, summed
        (rewinds, which every worker counts together, once), with those of the
        workers a restart replaced."""
        return self._summed_counters([w.counters for w in self.info])

    def _summed_counters(self, reports: Sequence[Mapping[str, int]]) -> dict[str, int]:
        counters: dict[str, int] = dict(self._past_counters)
        for report in reports:
            for k, v in report.items():
                if k == "rewinds":
                    counters[k] = max(counters.get(k, 0), v)  # every worker rewinds together
                else:
                    counters[k] = counters.get(k, 0) + v
        counters["worker_restarts"] = self.restarts
        return counters

    def worker_rows(self) -> list[WorkerInfo]:
        return list(self.info)

    def metrics_snapshot(self) -> MetricsSnapshot:
        """One view over every worker: their latest reports, merged (the Runtime contract)."""
        task_worker = {
            (m.component, m.task_index): w.index for w in list(self.info) for m in w.metrics
        }
        return self.bank.snapshot(
            time.monotonic(),
            self.task_metrics(),
            self.counters(),
            workers=self.worker_rows(),
            task_names=self.task_names,
            sources=[p for i in sorted(self._sources) for p in self._sources[i]],
            task_worker=task_worker,
        )

    def close(self) -> None:
        """Nothing to release after :meth:`run` (it stops the workers and lets the
        claim go itself); stops any worker left and lets the claim go, if not.
        Idempotent."""
        self._kill_all()
        self._store.close()

    # -- running -------------------------------------------------------------------
    def _start(self, until_idle: bool, duration: float | None) -> list[Any]:
        n = self.workers
        ctx = multiprocessing.get_context("fork")
        pipes: dict[tuple[int, int], tuple[int, int]] = {}
        for a in range(n):
            for b in range(n):
                if a != b:
                    pipes[(a, b)] = pipe()
        PIPES[:] = [fd for pair in pipes.values() for fd in pair]
        procs = []
        conns = []
        for i in range(n):
            writers = {b: pipes[(i, b)][1] for b in range(n) if b != i}
            readers = {a: pipes[(a, i)][0] for a in range(n) if a != i}
            keep = set(writers.values()) | set(readers.values())
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(
                target=worker_main,
                args=(
                    self.topology,
                    self.config,
                    i,
                    n,
                    writers,
                    readers,
                    keep,
                    send,
                    os.getpid(),
                    until_idle,
                    duration,
                    self.clock,
                ),
                name=f"statestream-worker-{i}",
                daemon=False,
            )
            p.start()
            send.close()
            procs.append(p)
            conns.append(recv)
            self.info[i].pid = p.pid or 0
        for fd in PIPES:
            os.close(fd)
        PIPES.clear()
        self._procs = procs
        return conns

    def _kill_all(self) -> None:
        for p in self._procs:
            with contextlib.suppress(Exception):
                p.kill()
        for p in self._procs:
            p.join(5)
        self._procs = []

    def _bank(self) -> None:
        """Keep the counts of the workers being replaced (metrics cover the whole run)."""
        for w in self.info:
            for m in w.metrics:
                m.queued = m.retrying = 0
                self._past.append(m)
            for k, v in w.counters.items():
                if k in ("timed_out", "acker_expired", "late_acks", "rewinds"):
                    self._past_counters[k] = self._past_counters.get(k, 0) + v
            w.metrics = []
            w.counters = {}
        self.bank.retire_workers()

    def run(self, until_idle: bool = False, duration: float | None = None) -> RunResult:
        """Run the workers until they finish (as ``LocalRuntime.run``), restarting them
        when one dies; returns the merged RunResult."""
        try:
            return self._run(until_idle, duration)
        finally:
            # An exception here (Ctrl-C twice, a fatal worker) leaves no worker behind.
            try:
                self._kill_all()
            finally:
                # The workers are gone (joined), so nothing shares the claim now.
                self._store.close()

    def _run(self, until_idle: bool, duration: float | None) -> RunResult:
        self.open()
        start = time.monotonic()
        self.bank.begin(start)
        deadline = start + duration if duration is not None else None
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            watch = self._watch(self._start(until_idle, left))
            if watch.fatal is not None:
                self._kill_all()
                self._raise_fatal(watch.fatal)
            if watch.failure is None:
                for p in self._procs:
                    p.join(10)
                self._procs = []
                break
            self._kill_all()
            self._restart_after(watch.failure)
            if self._stop or (deadline is not None and time.monotonic() >= deadline):
                return self._merge({}, time.monotonic() - start, "stopped")
        reason = next((r.reason for r in watch.results.values()), "stopped")
        return self._merge(watch.results, time.monotonic() - start, reason)

    def _watch(self, conns: list[Any]) -> _Watch:
        """Listen to one generation of workers until each has sent its result, one
        failed (``fatal``) or one died (``failure``)."""
        from multiprocessing.connection import wait

        watch = _Watch(
            conns,
            {c: i for i, c in enumerate(conns)},
            {p.sentinel: i for i, p in enumerate(self._procs)},
        )
        while len(watch.results) < self.workers and watch.failure is None and watch.fatal is None:
            ready = wait(list(watch.live) + list(watch.by_sentinel), timeout=1.0)
            if self._store.lost is not None:
                # Another run may write this topology's state now: stop at
                # once, as a crash would; what was committed stays.
                self._kill_all()
                self._store.check()
            for r in ready:
                if r in watch.live:
                    i = watch.live[r]
                    try:
                        kind, _, payload = conns[i].recv()
                    except (EOFError, OSError):
                        del watch.live[r]
                        continue
                    self._hear(watch, i, kind, payload)
                else:
                    watch.exited.add(watch.by_sentinel.pop(r))
            # A worker gone without its result: drain what it sent, then decide.
            for i in list(watch.exited):
                self._judge_exit(watch, i)
            if (
                watch.failure is None
                and watch.fatal is None
                and len(watch.exited) == self.workers
                and len(watch.results) < self.workers
            ):
                watch.failure = "the workers lost each other"
        for c in conns:
            c.close()
        return watch

    def _hear(self, watch: _Watch, i: int, kind: str, payload: Any) -> None:
        if kind == "progress":
            self._progress(i, payload)
        elif kind == "done":
            watch.results[i] = payload
        elif kind == "fatal":
            watch.fatal = (i, payload)

    def _judge_exit(self, watch: _Watch, i: int) -> None:
        """Worker ``i`` exited: take what it sent last; without its result, a failure
        unless it died of a peer's death (that one is the cause)."""
        if i in watch.results:
            return
        conn = watch.conns[i]
        while conn in watch.live and conn.poll():
            try:
                kind, _, payload = conn.recv()
            except (EOFError, OSError):
                break
            self._hear(watch, i, kind, payload)
        if i in watch.results or watch.fatal is not None:
            return
        # The sentinel closes a moment before the exit status is there.
        self._procs[i].join(1.0)
        code = self._procs[i].exitcode
        if code == EXIT_PEER_LOST:
            return  # a peer's death; that one is the cause
        watch.failure = self._describe_exit(i, code)

    def _raise_fatal(self, fatal: tuple[int, Any]) -> NoReturn:
        """Raise the error a worker failed with (the workers are stopped)."""
        i, (err, line, text) = fatal
        if isinstance(err, StatestreamError):
            # Our own errors say what to do in their one line, which the
            # caller prints: the worker's traceback is for --verbose only.
            log.debug("worker %d failed:\n%s", i, text)
            raise err
        log.error("worker %d failed:\n%s", i, text)
        if isinstance(err, BaseException):
            raise err
        raise RuntimeFailure(f"{self.topology.name}: worker {i} failed: {line}")

    def _restart_after(self, failure: str) -> None:
        """A worker died: count it (too many deaths stop the run) before the restart."""
        now = time.monotonic()
        self.deaths.append(now)
        while self.deaths and now - self.deaths[0] > _DEATH_WINDOW:
            self.deaths.popleft()
        if len(self.deaths) >= MAX_DEATHS:
            raise RuntimeFailure(
                f"{self.topology.name}: workers died {len(self.deaths)} times within "
                f"{_DEATH_WINDOW:.0f} s; the last: {failure}. The run stops: look at the "
                "log above for why they died"
            )
        self.restarts += 1
        self._bank()
        log.warning(
            "%s: %s; restarting the workers from the last committed checkpoint (restart %d)",
            self.topology.name,
            failure,
            self.restarts,
        )
        for w in self.info:
            w.restarts = self.restarts

    def _describe_exit(self, i: int, code: int | None) -> str:
        pid = self.info[i].pid
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"worker {i} (pid {pid}) was killed by {name}"
        return f"worker {i} (pid {pid}) exited with code {code} before the run was done"

    def _progress(self, i: int, payload: Mapping[str, Any]) -> None:
        w = self.info[i]
        now = time.monotonic()
        executed = sum(m.executed for m in payload["metrics"])
        at = self._reported_at[i]
        if at and now > at:
            w.rate = max(0.0, (executed - w.executed) / (now - at))
        self._reported_at[i] = now
        w.executed = executed
        w.pid = payload["pid"]
        w.tasks = payload["tasks"]
        w.metrics = payload["metrics"]
        w.counters = payload["counters"]
        self.bank.absorb(i, payload["bank"])
        self._sources[i] = payload["sources"]

    def _merge(self, results: Mapping[int, RunResult], elapsed: float, reason: str) -> RunResult:
        self.bank.end(time.monotonic())
        components: dict[str, TaskMetrics] = {}
        for m in self.task_metrics():
            components.setdefault(m.component, TaskMetrics(m.component, -1)).add(m)
        errors: list[ErrorReport] = []
        for i in sorted(results):
            errors.extend(results[i].errors)
        counters = self._summed_counters([results[i].counters for i in sorted(results)])
        return RunResult(components, errors, elapsed, reason, counters)


@dataclass
class _Watch:
    """What the supervisor has heard from one generation of workers."""

    conns: list[Any]  # the report pipe of each worker, by index
    live: dict[Any, int]  # the report pipes still open -> worker index
    by_sentinel: dict[Any, int]  # the process sentinels not yet ready -> worker index
    results: dict[int, RunResult] = field(default_factory=dict)
    exited: set[int] = field(default_factory=set)
    failure: str | None = None  # a worker died without its result
    fatal: Any = None  # (index, (error, line, traceback)) of a worker that failed
