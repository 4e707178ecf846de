"""Random compound faults from a seed: rounds of one or two faults at once (worker SIGKILL, SIGSTOP past its
lease, SIGTERM, a network partition past its lease, API node SIGKILL, Redis restart, Postgres stop), each
undone after a while, and a supervisor that restarts what exits on its own, as an orchestrator would.

Every random choice of a round is drawn before its faults start, so one seed gives one sequence of faults
whatever the timing of the processes.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from app.testing.chaos_cluster import ChaosCluster, Timeline, alive, resume, send
from app.testing.cluster import READY_LINE, ServerProcess

FAULT_KINDS = (
    "worker_sigkill",
    "worker_sigstop",
    "worker_sigterm",
    "worker_partition",
    "api_sigkill",
    "redis_restart",
    "postgres_stop",
)


@dataclass(frozen=True)
class FaultPlan:
    """How often and how long: seconds drawn uniformly from each range."""

    gap_s: tuple[float, float] = (3.0, 10.0)
    #: The share of rounds that inject two faults at once (their starts a little apart).
    compound_share: float = 0.4
    #: A frozen or partitioned worker stays so this much longer than its lease: another run takes its job over.
    past_lease_s: tuple[float, float] = (2.0, 5.0)
    #: How long a killed process stays down before the orchestrator starts it again.
    down_s: tuple[float, float] = (0.5, 3.0)
    postgres_down_s: tuple[float, float] = (2.0, 8.0)
    redis_down_s: tuple[float, float] = (0.0, 2.0)
    #: A worker sent SIGTERM must have exited within this (it hands its jobs over, or finishes them).
    sigterm_exit_bound_s: float = 60.0
    #: Kinds drawn first, in this order (the short CI form leads with a partition: it must happen every run).
    lead: tuple[str, ...] = ()


#: The short form's plan (tests/faults/test_chaos.py; `bench.chaos --short`): rounds closer together, and a
#: partition first, so that every run has one.
SHORT_PLAN = FaultPlan(gap_s=(2.0, 6.0), lead=("worker_partition",))


@dataclass(frozen=True)
class Fault:
    kind: str
    #: Which API node or worker (index), else 0.
    target: int
    hold_s: float
    delay_s: float
    #: Postgres' stop mode ("fast" or "immediate").
    mode: str = "fast"


def process_name(process: ServerProcess) -> str:
    return process.log_path.stem.rsplit("-", 1)[0]


def current_worker_id(process: ServerProcess) -> str:
    """The id the worker registered under since it last started ("starting" before it is ready)."""
    if not process.log_path.exists():
        return "starting"
    with process.log_path.open("rb") as log:
        log.seek(process.log_offset)
        found = READY_LINE.search(log.read().decode(errors="replace"))
    return found.group(1) if found else "starting"


@dataclass
class FaultInjector:
    chaos: ChaosCluster
    rng: random.Random
    timeline: Timeline
    plan: FaultPlan = field(default_factory=FaultPlan)
    injected: Counter[str] = field(default_factory=Counter)
    #: Broken promises seen while injecting (a worker that outlived its SIGTERM bound): (at_s, what).
    findings: list[tuple[float, str]] = field(default_factory=list)
    #: Processes the supervisor started again after they exited on their own.
    restarted_on_their_own: int = 0
    _busy: set[int] = field(default_factory=set)
    _deck: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._deck = [kind for kind in self.plan.lead if kind in self.kinds()]

    def kinds(self) -> list[str]:
        return [kind for kind in FAULT_KINDS if kind != "worker_partition" or self.chaos.namespace is not None]

    def _draw_kind(self, taken: list[str]) -> str:
        """The next kind from a shuffled deck of all of them (refilled when empty), so that every kind comes
        once in each pass; one not `taken` already this round."""
        for _ in range(2 * len(FAULT_KINDS)):
            if not self._deck:
                self._deck = self.rng.sample(self.kinds(), len(self.kinds()))
            kind = self._deck.pop(0)
            if kind not in taken:
                return kind
            self._deck.append(kind)
        raise AssertionError("no fault kind left to draw")

    def draw_round(self) -> list[Fault]:
        count = 2 if self.rng.random() < self.plan.compound_share else 1
        kinds: list[str] = []
        for _ in range(count):
            kinds.append(self._draw_kind(kinds))
        workers = list(range(len(self.chaos.workers)))
        apis = list(range(len(self.chaos.apis)))
        faults = []
        for order, kind in enumerate(kinds):
            delay_s = 0.0 if order == 0 else self.rng.uniform(0.0, 3.0)
            if kind == "worker_partition":
                target = len(self.chaos.workers) - 1
            elif kind.startswith("worker_"):
                target = self.rng.choice(workers)
            elif kind == "api_sigkill":
                target = self.rng.choice(apis)
            else:
                target = 0
            if kind.startswith("worker_") and target in workers:
                workers.remove(target)  # one fault a process a round: a compound round hits two of them
            elif kind.startswith("worker_"):
                continue  # the partitionable worker already has a fault this round
            if kind == "api_sigkill":
                apis.remove(target)
            if kind in ("worker_sigstop", "worker_partition"):
                hold_s = self.chaos.lease_s + self.rng.uniform(*self.plan.past_lease_s)
            elif kind == "postgres_stop":
                hold_s = self.rng.uniform(*self.plan.postgres_down_s)
            elif kind == "redis_restart":
                hold_s = self.rng.uniform(*self.plan.redis_down_s)
            else:
                hold_s = self.rng.uniform(*self.plan.down_s)
            mode = self.rng.choice(("fast", "immediate")) if kind == "postgres_stop" else "fast"
            faults.append(Fault(kind, target, round(hold_s, 2), round(delay_s, 2), mode))
        return faults

    def run(self, duration_s: float, stop: threading.Event) -> None:
        """Rounds of faults until `duration_s` (on the timeline's clock) or `stop`; each round undone before the
        next."""
        while not stop.is_set():
            gap_s = self.rng.uniform(*self.plan.gap_s)
            if self.timeline.clock.now_s() + gap_s >= duration_s or stop.wait(gap_s):
                return
            self.inject(self.draw_round())

    def inject(self, faults: list[Fault]) -> None:
        threads = [threading.Thread(target=self._apply, args=(fault,), daemon=True) for fault in faults]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _apply(self, fault: Fault) -> None:
        time.sleep(fault.delay_s)
        actions: dict[str, Callable[[Fault], None]] = {
            "worker_sigkill": self._worker_sigkill,
            "worker_sigstop": self._worker_sigstop,
            "worker_sigterm": self._worker_sigterm,
            "worker_partition": self._worker_partition,
            "api_sigkill": self._api_sigkill,
            "redis_restart": self._redis_restart,
            "postgres_stop": self._postgres_stop,
        }
        self.injected[fault.kind] += 1
        try:
            actions[fault.kind](fault)
        except Exception as error:  # a fault that could not be undone is itself reported, and the run goes on
            self.findings.append((self.timeline.clock.now_s(), f"{fault.kind} could not be applied/undone: {error!r}"))
            self.timeline.note(f"{fault.kind}: error {error!r}")

    def _hold(self, process: ServerProcess) -> None:
        with self._lock:
            self._busy.add(id(process))

    def _release(self, process: ServerProcess) -> None:
        with self._lock:
            self._busy.discard(id(process))

    def _describe(self, worker: ServerProcess) -> str:
        return f"{process_name(worker)} ({current_worker_id(worker)})"

    def _worker_sigkill(self, fault: Fault) -> None:
        worker = self.chaos.workers[fault.target]
        self._hold(worker)
        try:
            self.timeline.note(f"worker SIGKILL: {self._describe(worker)}, down {fault.hold_s} s")
            resume(worker)  # SIGKILL works on a stopped process too; resuming first keeps its state plain
            worker.kill()
            time.sleep(fault.hold_s)
            worker.start()
            self.timeline.note(f"worker started again: {process_name(worker)}")
        finally:
            self._release(worker)

    def _worker_sigstop(self, fault: Fault) -> None:
        worker = self.chaos.workers[fault.target]
        self._hold(worker)
        try:
            self.timeline.note(f"worker SIGSTOP: {self._describe(worker)} for {fault.hold_s} s")
            send(worker, signal.SIGSTOP)
            time.sleep(fault.hold_s)
            resume(worker)
            self.timeline.note(f"worker SIGCONT: {process_name(worker)}")
        finally:
            self._release(worker)

    def _worker_sigterm(self, fault: Fault) -> None:
        worker = self.chaos.workers[fault.target]
        self._hold(worker)
        try:
            self.timeline.note(f"worker SIGTERM: {self._describe(worker)}")
            sent = time.monotonic()
            send(worker, signal.SIGTERM)
            bound = self.plan.sigterm_exit_bound_s
            while alive(worker) and time.monotonic() - sent < bound:
                time.sleep(0.1)
            if alive(worker):
                message = f"{process_name(worker)} still running {bound:.0f} s after SIGTERM: SIGKILLed"
                self.findings.append((self.timeline.clock.now_s(), message))
                self.timeline.note(message)
                worker.kill()
            else:
                code = worker.process.returncode if worker.process is not None else None
                self.timeline.note(
                    f"worker exited {time.monotonic() - sent:.1f} s after SIGTERM (code {code}): {process_name(worker)}"
                )
            time.sleep(fault.hold_s)
            worker.start()
            self.timeline.note(f"worker started again: {process_name(worker)}")
        finally:
            self._release(worker)

    def _worker_partition(self, fault: Fault) -> None:
        namespace = self.chaos.namespace
        assert namespace is not None
        worker = self.chaos.workers[fault.target]
        self._hold(worker)
        try:
            self.timeline.note(f"partition: {self._describe(worker)} cut off for {fault.hold_s} s")
            namespace.cut()
            time.sleep(fault.hold_s)
            namespace.mend()
            self.timeline.note(f"partition mended: {process_name(worker)}")
        finally:
            self._release(worker)

    def _api_sigkill(self, fault: Fault) -> None:
        api = self.chaos.apis[fault.target]
        self._hold(api)
        try:
            self.timeline.note(f"API node SIGKILL: {process_name(api)}, down {fault.hold_s} s")
            api.kill()
            time.sleep(fault.hold_s)
            try:
                api.start()
            except RuntimeError as error:  # it exited while starting (Postgres away): as an orchestrator would,
                # the supervisor starts it again
                first_line = str(error).splitlines()[0]
                self.timeline.note(f"API node did not start ({first_line}): left to the supervisor")
                return
            self.timeline.note(f"API node started again: {process_name(api)}")
        finally:
            self._release(api)

    def _redis_restart(self, fault: Fault) -> None:
        self.timeline.note(f"Redis restart (down {fault.hold_s} s, its data lost)")
        self.chaos.redis_server.stop()
        time.sleep(fault.hold_s)
        self.chaos.redis_server.start()
        self.timeline.note("Redis back")

    def _postgres_stop(self, fault: Fault) -> None:
        self.timeline.note(f"Postgres stop ({fault.mode}) for {fault.hold_s} s")
        self.chaos.postgres.stop(fault.mode)
        time.sleep(fault.hold_s)
        self.chaos.postgres.start()
        self.timeline.note("Postgres back")

    def supervise(self, stop: threading.Event) -> None:
        """Start again, after a second, any API node or worker that exited while no fault held it (as an
        orchestrator restarts a process that took itself down, e.g. a worker that could not start while
        Postgres was away)."""
        while not stop.wait(1.0):
            for process in [*self.chaos.apis, *self.chaos.workers]:
                with self._lock:
                    held = id(process) in self._busy
                if held or alive(process) or process.process is None:
                    continue
                code = process.process.returncode
                self.timeline.note(f"{process_name(process)} exited on its own (code {code}): started again")
                self.restarted_on_their_own += 1
                try:
                    process.start()
                except RuntimeError as error:  # an API node that cannot start yet: tried again next second
                    self.timeline.note(f"{process_name(process)} did not start: {str(error)[:200]}")
