"""The chaos test: a seeded mixed load and seeded compound faults on two API nodes and two workers (one of them
partitionable) over a private Postgres and Redis, then, once the faults stop, the invariants (chaos_checks.py).

    report = run_chaos(seed, duration_s, logs)
    print(report.render())   # the seed, the figures, each violation and the fault timeline

bench/chaos.py runs it long over many seeds; tests/faults/test_chaos.py runs a short form in CI.
"""

from __future__ import annotations

import json
import os
import random
import resource
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.testing.chaos_checks import (
    INVARIANTS,
    ClusterReader,
    TakeoverWatch,
    Violation,
    answer_violations,
    response_violations,
)
from app.testing.chaos_cluster import ChaosCluster, Clock, Timeline, chaos_cluster
from app.testing.chaos_faults import FaultInjector, FaultPlan
from app.testing.chaos_load import LoadClient, LoadPlan, Recorder
from app.testing.cluster import db_rows

#: Once the faults stop (every process running, the link up), every response is terminal within this.
QUIET_BOUND_S = 180.0
#: Seconds of the timeline printed before a violating response was created and after its client last saw it.
TIMELINE_MARGIN_S = 15.0
CLOCK_TICKS_S = os.sysconf("SC_CLK_TCK")


@dataclass
class ChaosReport:
    seed: int
    duration_s: float
    namespace: str
    faults: dict[str, int]
    #: Operations begun, and the responses acknowledged (their client got an id), by operation.
    operations: dict[str, int]
    responses: dict[str, int]
    final_statuses: dict[str, int]
    requests: int
    answered_503: int
    refused_connections: int
    #: From the end of the faults until every client is done and no response is queued or in progress.
    time_to_quiet_s: float | None
    #: CPU the cluster's processes and this harness used, in cores (CPU seconds / wall seconds).
    cpu_cores: float
    restarted_on_their_own: int
    violations: list[Violation]
    timeline: list[tuple[float, str]]
    logs: str
    created_s: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.violations

    def figures(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "duration_s": self.duration_s,
            "faults_injected": sum(self.faults.values()),
            "faults": self.faults,
            "operations": self.operations,
            "responses": sum(self.responses.values()),
            "responses_by_operation": self.responses,
            "final_statuses": self.final_statuses,
            "requests": self.requests,
            "answered_503": self.answered_503,
            "refused_connections": self.refused_connections,
            "time_to_quiet_s": self.time_to_quiet_s,
            "cpu_cores": round(self.cpu_cores, 2),
            "restarted_on_their_own": self.restarted_on_their_own,
            "violations": Counter(violation.invariant for violation in self.violations),
            "partition": self.namespace,
        }

    def render(self) -> str:
        """The seed first (to replay it), the figures, then each violation and the faults around it."""
        lines = [f"chaos seed {self.seed}: {'passed' if self.passed else 'FAILED'}", json.dumps(self.figures())]
        for violation in self.violations:
            lines.append(f"  [seed {self.seed}] {violation.invariant} ({INVARIANTS[violation.invariant]})")
            lines.append(f"    {violation.response_id or ''} at {violation.at_s} s: {violation.detail}")
            if violation.response_id in self.created_s:
                start, end = self.created_s[violation.response_id]
                around = [
                    f"{at:7.2f} {what}"
                    for at, what in self.timeline
                    if start - TIMELINE_MARGIN_S <= at <= end + TIMELINE_MARGIN_S
                ]
                lines.append(f"    lived {start} s - {end} s; faults around it: " + ("; ".join(around) or "none"))
        lines.append("timeline:")
        lines += [f"  {at:7.2f} {what}" for at, what in self.timeline]
        lines.append(f"logs: {self.logs}")
        return "\n".join(lines)


class CpuMeter:
    """CPU seconds of the cluster's processes (API nodes, workers, Redis, Postgres with its ended backends),
    sampled while they run: a restarted process's earlier time is kept under its old pid."""

    def __init__(self, chaos: ChaosCluster) -> None:
        self.chaos = chaos
        self.seconds_by_pid: dict[int, float] = {}
        self.started = time.monotonic()
        self.own_started = _own_cpu_s()

    def _pids(self) -> list[int]:
        processes = [*self.chaos.apis, *self.chaos.workers]
        pids = [process.process.pid for process in processes if process.process is not None]
        if self.chaos.redis_server.process is not None:
            pids.append(self.chaos.redis_server.process.pid)
        postmaster = self.chaos.postgres.data / "postmaster.pid"
        if postmaster.exists():
            first = postmaster.read_text().split("\n", 1)[0]
            if first.isdigit():
                pids.append(int(first))
        return pids

    def sample(self) -> None:
        for pid in self._pids():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            # utime, stime, cutime, cstime: fields 14-17 of stat, 12-15 after the name.
            ticks = sum(int(value) for value in fields[11:15])
            self.seconds_by_pid[pid] = max(self.seconds_by_pid.get(pid, 0.0), ticks / CLOCK_TICKS_S)

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            self.sample()

    def cores(self) -> float:
        wall_s = time.monotonic() - self.started
        total_s = sum(self.seconds_by_pid.values()) + _own_cpu_s() - self.own_started
        return total_s / wall_s if wall_s > 0 else 0.0


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _start(target: Any, *args: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def run_chaos(
    seed: int,
    duration_s: float,
    logs: Path,
    *,
    load: LoadPlan | None = None,
    faults: FaultPlan | None = None,
    need_namespace: bool = False,
) -> ChaosReport:
    """One seed on a fresh cluster (so that a seed replays the same way)."""
    logs.mkdir(parents=True, exist_ok=True)
    with chaos_cluster(logs, need_namespace=need_namespace) as chaos:
        return run_on(chaos, seed, duration_s, logs, load or LoadPlan(), faults or FaultPlan())


def run_on(
    chaos: ChaosCluster, seed: int, duration_s: float, logs: Path, load: LoadPlan, faults: FaultPlan
) -> ChaosReport:
    clock = Clock()
    timeline = Timeline(clock)
    recorder = Recorder(clock)
    injector = FaultInjector(chaos, random.Random(f"{seed}:faults"), timeline, faults)
    watch = TakeoverWatch(chaos, clock)
    meter = CpuMeter(chaos)
    if chaos.namespace is None:
        timeline.note(f"partition faults skipped: {chaos.namespace_missing}")
    stop_load, stop_watching = threading.Event(), threading.Event()
    clients = [
        LoadClient(index, chaos.bases, random.Random(f"{seed}:client:{index}"), recorder, load)
        for index in range(load.clients)
    ]
    client_threads = [_start(client.run, stop_load) for client in clients]
    watchers = [_start(watch.run, stop_watching), _start(injector.supervise, stop_watching)]
    watchers.append(_start(meter.run, stop_watching))
    try:
        try:
            injector.run(duration_s, stop_load)
        finally:
            stop_load.set()
            chaos.everything_running()
            timeline.note("faults over, everything running; the load stops")
        time_to_quiet = _wait_quiet(chaos, client_threads, load)
        timeline.note(f"quiet after {time_to_quiet} s" if time_to_quiet is not None else "never quiet")
        meter.sample()
    finally:
        # Before the cluster is torn down: a supervisor still watching would start its processes again.
        stop_load.set()
        stop_watching.set()
        for thread in watchers:
            thread.join(30)
    violations = _check(chaos, recorder, injector, watch)
    statuses = _final_statuses(chaos)
    answers = recorder.answers
    return ChaosReport(
        seed=seed,
        duration_s=duration_s,
        namespace=chaos.namespace.name if chaos.namespace is not None else f"skipped: {chaos.namespace_missing}",
        faults=dict(injector.injected),
        operations=dict(recorder.begun),
        responses=dict(Counter(tracked.op for tracked in recorder.tracked.values())),
        final_statuses=statuses,
        requests=len(answers),
        answered_503=sum(answer.status == 503 for answer in answers),
        refused_connections=sum(answer.error == "ConnectError" for answer in answers),
        time_to_quiet_s=time_to_quiet,
        cpu_cores=meter.cores(),
        restarted_on_their_own=injector.restarted_on_their_own,
        violations=violations,
        timeline=timeline.entries,
        logs=str(logs),
        created_s={rid: (t.created_s, t.last_seen_s or t.created_s) for rid, t in recorder.tracked.items()},
    )


def _wait_quiet(chaos: ChaosCluster, clients: list[threading.Thread], load: LoadPlan) -> float | None:
    """Seconds until every client finished its operation and no response is queued or in progress; None
    beyond QUIET_BOUND_S (each such response is then a violation)."""
    started = time.monotonic()
    deadline = started + max(QUIET_BOUND_S, load.op_bound_s + 30)
    for thread in clients:
        thread.join(max(0.0, deadline - time.monotonic()))
    reader = ClusterReader(chaos)
    try:
        while time.monotonic() < deadline:
            try:
                if not any(thread.is_alive() for thread in clients) and not reader.not_terminal():
                    return round(time.monotonic() - started, 1)
            except Exception:  # Postgres still starting: asked again
                pass
            time.sleep(0.5)
    finally:
        reader.close()
    return None


def _check(chaos: ChaosCluster, recorder: Recorder, injector: FaultInjector, watch: TakeoverWatch) -> list[Violation]:
    violations = answer_violations(recorder)
    reader = ClusterReader(chaos)
    try:
        for tracked in list(recorder.tracked.values()):
            violations += response_violations(reader, tracked)
        for response_id in reader.not_terminal():
            if response_id not in recorder.tracked:  # one whose client never got its id (its node died, a timeout)
                detail = f"unacknowledged, still not terminal; {reader.diagnose(response_id)}"
                violations.append(Violation("not_terminal", detail, response_id))
    finally:
        reader.close()
    violations += watch.violations
    violations += [Violation("fault_promise", what, at_s=at) for at, what in injector.findings]
    return violations


def _final_statuses(chaos: ChaosCluster) -> dict[str, int]:
    rows = db_rows(chaos.postgres.url, "SELECT status, count(*) AS n FROM responses GROUP BY status")
    return {str(row["status"]): int(row["n"]) for row in rows}
