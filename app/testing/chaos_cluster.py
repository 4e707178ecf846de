"""The chaos test's cluster: two API nodes and two workers on a private Postgres and Redis, the second worker in a
network namespace of the test's own (so that it can be partitioned while it runs), and the timeline of what was
done to them.

No pytest here: bench/chaos.py imports it too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from app.testing.cluster import Cluster, PostgresServer, RedisServer, ServerProcess, private_cluster, worker_id
from app.testing.netns import NetworkNamespace, network_namespace, unavailable_reason

#: Short leases and a fast reconciliation keep a run's takeovers within seconds; many attempts keep compound faults
#: (a job whose worker dies three times over) from ending a background response `failed` by the attempt budget,
#: which is policy, not a fault; one llama.cpp thread a worker keeps two workers within two cores.
CHAOS_LEASE_S = 5.0
CHAOS_ENV = {
    "RESPONSES_LEASE_S": str(CHAOS_LEASE_S),
    "RESPONSES_RECONCILE_INTERVAL_S": "1",
    "RESPONSES_MAX_ATTEMPTS": "10",
    "RESPONSES_WORKER_CONCURRENCY": "2",
    "RESPONSES_N_THREADS": "1",
}
API_NODES = 2


class Clock:
    """Seconds since the run started, the unit of every time in a chaos report."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def now_s(self) -> float:
        return round(time.monotonic() - self.started, 2)


@dataclass
class Timeline:
    """What happened to the cluster, in order: `(at_s, what)`; printed with any violation, to replay it."""

    clock: Clock
    entries: list[tuple[float, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, what: str) -> None:
        with self._lock:
            self.entries.append((self.clock.now_s(), what))

    def between(self, start_s: float, end_s: float) -> list[tuple[float, str]]:
        with self._lock:
            return [(at, what) for at, what in self.entries if start_s <= at <= end_s]


@dataclass
class ChaosCluster:
    cluster: Cluster
    postgres: PostgresServer
    redis_server: RedisServer
    apis: list[ServerProcess]
    #: workers[-1] runs inside `namespace` when there is one.
    workers: list[ServerProcess]
    namespace: NetworkNamespace | None
    #: Why there is no namespace (the partition fault is then skipped).
    namespace_missing: str | None
    lease_s: float = CHAOS_LEASE_S

    @property
    def bases(self) -> list[str]:
        return [api.base_url for api in self.apis]

    def partitionable(self, worker: ServerProcess) -> bool:
        return self.namespace is not None and worker is self.workers[-1]

    def restart(self, process: ServerProcess) -> None:
        """Start a process that died again (same port, same log, same namespace)."""
        process.start()

    def unfreeze(self) -> None:
        """Resume frozen workers and mend the link."""
        for process in self.workers:
            resume(process)
        if self.namespace is not None:
            self.namespace.mend()

    def everything_running(self) -> None:
        """Undo whatever a fault left: unfreeze, then start what is down."""
        self.unfreeze()
        for process in [*self.apis, *self.workers]:
            if process.process is None or process.process.poll() is not None:
                process.start()


def alive(process: ServerProcess) -> bool:
    return process.process is not None and process.process.poll() is None


def send(process: ServerProcess, signal_number: int) -> None:
    if process.process is not None and process.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.process.pid, signal_number)


def resume(process: ServerProcess) -> None:
    send(process, signal.SIGCONT)


def ready_workers(workers: list[ServerProcess], timeout_s: float = 120) -> list[str]:
    return [worker_id(worker, timeout_s) for worker in workers]


@contextlib.contextmanager
def chaos_cluster(logs: Path, *, need_namespace: bool = False) -> Iterator[ChaosCluster]:
    """The cluster, ready (both workers registered); torn down afterwards, namespace and link included.

    Without root the second worker runs on the host and partitions are skipped, unless `need_namespace`, which
    raises instead (CI runs as root: a partition that silently never happens tests nothing).
    """
    missing = unavailable_reason()
    if missing is not None and need_namespace:
        raise RuntimeError(f"the chaos test needs a network namespace: {missing}")
    with contextlib.ExitStack() as stack:
        namespace = stack.enter_context(network_namespace()) if missing is None else None
        also = [namespace.host_address] if namespace is not None else []
        trusted = [str(namespace.network)] if namespace is not None else []
        postgres = PostgresServer(also_listen=also, trusted_networks=trusted)
        redis_server = RedisServer(also_listen=also)
        cluster, postgres, redis_server = stack.enter_context(
            private_cluster(logs, postgres=postgres, redis_server=redis_server, **CHAOS_ENV)
        )
        workers = [cluster.worker("worker_a")]
        if namespace is not None:
            inside = {
                "RESPONSES_DATABASE_URL": postgres.url_on(namespace.host_address),
                "RESPONSES_REDIS_URL": redis_server.url_on(namespace.host_address),
            }
            workers.append(cluster.worker("worker_b_netns", wrapper=namespace.wrapper(), **inside))
        else:
            workers.append(cluster.worker("worker_b"))
        with ThreadPoolExecutor(API_NODES) as starting:  # each waits for its /health: started side by side
            apis = list(starting.map(lambda index: cluster.api(f"api_{index}"), range(API_NODES)))
        chaos = ChaosCluster(cluster, postgres, redis_server, apis, workers, namespace, missing)
        # A frozen worker ignores SIGTERM, a partitioned one hangs on its way out: freed before private_cluster
        # stops them, even after a failure.
        stack.callback(chaos.unfreeze)
        ready_workers(workers)
        for api in apis:
            cluster.wait_ready(api)
        yield chaos
