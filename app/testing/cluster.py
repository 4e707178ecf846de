"""Real processes for fault tests and bench/faults.py: API nodes and workers that can be SIGKILLed, and PRIVATE
Redis and Postgres servers (own ports, own data) that may be stopped and restarted, never the shared ones.

No pytest here: the bench imports it too.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from app.events.terminal import TERMINAL_EVENT_TYPES, TERMINAL_STATUSES
from app.testing.servers import RedisServer, ServerProcess, free_port, run_cli, wait_until_ready

__all__ = [
    "Cluster",
    "PostgresServer",
    "RedisServer",
    "ServerProcess",
    "StreamReader",
    "db_fetch",
    "db_rows",
    "free_port",
    "poll_terminal",
    "postgres_bin",
    "private_cluster",
    "read_sse_lines",
    "wait_for_status",
]

STORY = "Write a long story about a dragon who learns to bake bread."
PG_START_TIMEOUT_S = 60


def postgres_bin(name: str) -> str:
    """A Postgres server binary (initdb, pg_ctl): the newest /usr/lib/postgresql/*/bin (Debian keeps them off
    PATH), else PATH."""
    candidates = sorted(glob(f"/usr/lib/postgresql/*/bin/{name}"), key=lambda path: int(Path(path).parts[4]))
    found = candidates[-1] if candidates else shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found: install the Postgres server binaries")
    return found


class PostgresServer:
    """A private Postgres cluster (initdb in a temp dir, pg_ctl on a free port, trust auth, fsync off).

    As root, initdb refuses to run: the cluster then runs as the `postgres` user (or `nobody`).
    `also_listen`: addresses besides 127.0.0.1 to serve on, and `trusted_networks` (CIDR) whose clients need no
    password there (a network namespace's link).
    """

    def __init__(self, also_listen: Sequence[str] = (), trusted_networks: Sequence[str] = ()) -> None:
        self.port = free_port()
        self.also_listen = list(also_listen)
        self.trusted_networks = list(trusted_networks)
        self.directory = Path(tempfile.mkdtemp(prefix="llama-responses-pg-"))
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"
        self._user: str | None = None
        if os.geteuid() == 0:
            self._user = _unprivileged_user()
            entry = pwd.getpwnam(self._user)
            os.chmod(self.directory, 0o755)  # the server user must reach its data directory
            os.chown(self.directory, entry.pw_uid, entry.pw_gid)
        self._initialised = False

    @property
    def admin_url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def url(self) -> str:
        """The database the app uses (created by `start`)."""
        return self.url_on("127.0.0.1")

    def url_on(self, host: str) -> str:
        return f"postgresql+asyncpg://postgres@{host}:{self.port}/responses"

    def _run(self, args: list[str], timeout_s: float = PG_START_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        command = ["runuser", "-u", self._user, "--", *args] if self._user else args
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)

    def start(self) -> PostgresServer:
        if not self._initialised:
            made = self._run(
                [postgres_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
            )
            if made.returncode != 0:
                raise RuntimeError(f"initdb failed: {made.stderr}")
            with (self.data / "pg_hba.conf").open("a") as rules:
                rules.writelines(f"host all all {network} trust\n" for network in self.trusted_networks)
        listen = ",".join(["127.0.0.1", *self.also_listen])
        # fsync and full-page writes off risk only an OS crash, which no test causes; synchronous_commit stays on:
        # off, an `immediate` stop (a crash) loses commits the server had acknowledged, and the tests would blame
        # the app for the rows and events that vanish.
        options = f"-p {self.port} -k {self.directory} -c listen_addresses={listen} -c fsync=off"
        options += " -c full_page_writes=off -c max_connections=200"
        started = self._run(
            [postgres_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start"]
        )
        if started.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {started.stderr}\n{self.log_text()}")
        if not self._initialised:
            asyncio.run(_execute(self.admin_url, "CREATE DATABASE responses"))
            self._initialised = True
        return self

    def stop(self, mode: str = "fast") -> None:
        """`fast`: a clean shutdown that drops clients; `immediate`: as if the server crashed."""
        if self.data.exists():
            self._run([postgres_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"])

    def restart(self, down_s: float = 0.0, mode: str = "fast") -> None:
        self.stop(mode)
        time.sleep(down_s)
        self.start()

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)

    def log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


def _unprivileged_user() -> str:
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise RuntimeError("running as root with no `postgres` or `nobody` user to run initdb as")


async def _execute(url: str, statement: str) -> None:
    connection = await _connect(url)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


async def _connect(url: str) -> Any:
    from sqlalchemy.engine import make_url

    target = make_url(url)
    return await asyncpg.connect(
        host=target.host, port=target.port or 5432, user=target.username, database=target.database, timeout=5
    )


async def _fetch(url: str, query: str, *args: Any) -> list[dict[str, Any]]:
    connection = await _connect(url)
    try:
        return [dict(record) for record in await connection.fetch(query, *args)]
    finally:
        await connection.close()


def db_rows(database_url: str, query: str, *args: Any) -> list[dict[str, Any]]:
    """Rows of a query on a Postgres database, as dicts (what the database holds, for assertions)."""
    return asyncio.run(_fetch(database_url, query, *args))


def db_fetch(database_url: str, query: str, *args: Any) -> Any:
    """The first column of the first row, or None."""
    rows = db_rows(database_url, query, *args)
    return next(iter(rows[0].values())) if rows else None


@dataclass
class Cluster:
    """API nodes and workers on one database and one Redis; every process started is stopped at the end."""

    database_url: str
    redis_url: str
    logs: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    processes: list[ServerProcess] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return {"RESPONSES_DATABASE_URL": self.database_url, "RESPONSES_REDIS_URL": self.redis_url, **self.extra_env}

    def api(self, name: str = "api", **env: str) -> ServerProcess:
        node = ServerProcess({**self.env(), **env}, self.logs / f"{name}-{len(self.processes)}.log")
        self.processes.append(node)
        return node.start()

    def worker(self, name: str = "worker", *, wrapper: Sequence[str] = (), **env: str) -> ServerProcess:
        """A worker; `wrapper` runs it (`ip netns exec <ns>`: in a network namespace)."""
        log_path = self.logs / f"{name}-{len(self.processes)}.log"
        node = ServerProcess({**self.env(), **env}, log_path, ["worker"], wrapper=wrapper)
        self.processes.append(node)
        return node.start()

    def wait_ready(self, node: ServerProcess, timeout_s: float = 90) -> None:
        wait_until_ready(node.base_url, timeout_s)

    def stop_all(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    def log_tail(self, lines: int = 40) -> str:
        parts = []
        for process in self.processes:
            if process.log_path.exists():
                text = process.log_path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {process.log_path.name}\n" + "\n".join(text))
        return "\n".join(parts)


@contextmanager
def private_cluster(
    logs: Path, *, postgres: PostgresServer | None = None, redis_server: RedisServer | None = None, **extra_env: str
) -> Iterator[tuple[Cluster, PostgresServer, RedisServer]]:
    """A private Postgres (migrated) and Redis (these, else new ones), and a Cluster on them; everything torn
    down afterwards."""
    postgres = postgres or PostgresServer()
    redis_server = redis_server or RedisServer()
    try:
        postgres.start()
        redis_server.start()
        cluster = Cluster(postgres.url, redis_server.url, logs, dict(extra_env))
        migrated = run_cli(["migrate"], cluster.env())
        if migrated.returncode != 0:
            raise RuntimeError(f"migrate failed: {migrated.stderr}")
        try:
            yield cluster, postgres, redis_server
        finally:
            cluster.stop_all()
    finally:
        redis_server.stop()
        postgres.destroy()


def read_sse_lines(lines: Iterator[str]) -> Iterator[dict[str, Any] | str]:
    """The events of an SSE body as dicts, and `"[DONE]"` for the end marker."""
    for line in lines:
        if line.startswith("data: "):
            data = line[6:]
            yield "[DONE]" if data == "[DONE]" else json.loads(data)


class StreamReader:
    """Reads one SSE request in a thread, so a test can kill processes while it runs.

    `events`: every event seen; `done`: whether `[DONE]` came; `error`: how it broke off, if it did.
    """

    def __init__(self, method: str, url: str, json_body: dict[str, Any] | None = None, timeout_s: float = 120):
        self.events: list[dict[str, Any]] = []
        self.done = False
        self.error: BaseException | None = None
        self.status_code: int | None = None
        self.ended_at: float | None = None
        self._thread = threading.Thread(target=self._read, args=(method, url, json_body, timeout_s), daemon=True)
        self._thread.start()

    def _read(self, method: str, url: str, json_body: dict[str, Any] | None, timeout_s: float) -> None:
        try:
            with httpx.stream(method, url, json=json_body, timeout=timeout_s) as stream:
                self.status_code = stream.status_code
                for item in read_sse_lines(stream.iter_lines()):
                    if item == "[DONE]":
                        self.done = True
                    else:
                        assert isinstance(item, dict)
                        self.events.append(item)
        except BaseException as error:  # a killed node: the test inspects how the stream broke off
            self.error = error
        finally:
            self.ended_at = time.monotonic()

    def wait_for(self, predicate: Any, timeout_s: float = 60) -> bool:
        """Until `predicate(events)` holds (True) or the stream ended / time ran out (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate(self.events):
                return True
            if not self._thread.is_alive():
                return bool(predicate(self.events))
            time.sleep(0.02)
        return False

    def join(self, timeout_s: float = 120) -> None:
        self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def response_id(self) -> str | None:
        for event in self.events:
            if "response" in event:
                return str(event["response"]["id"])
        return None

    @property
    def terminal(self) -> dict[str, Any] | None:
        for event in self.events:
            if event["type"] in TERMINAL_EVENT_TYPES:
                return event
        return None


def wait_for_status(
    base_url: str, response_id: str, statuses: frozenset[str] | set[str], timeout_s: float = 60
) -> dict[str, Any]:
    """GET the response until its status is one of `statuses` (or time runs out); the last body seen."""
    deadline = time.monotonic() + timeout_s
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            got = httpx.get(f"{base_url}/v1/responses/{response_id}", timeout=5)
            if got.status_code == 200:
                body = got.json()
                if body["status"] in statuses:
                    return body
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    return body


def poll_terminal(base_url: str, response_id: str, timeout_s: float = 60) -> dict[str, Any]:
    return wait_for_status(base_url, response_id, TERMINAL_STATUSES, timeout_s)


def sigkill(process: ServerProcess) -> None:
    """SIGKILL, as in a crash (no shutdown hooks)."""
    if process.process is not None and process.process.poll() is None:
        process.process.send_signal(signal.SIGKILL)
        process.process.wait(timeout=30)


#: Structured output long enough to be cut mid-document: twenty small numbers (~60 tokens), well within budget.
NUMBERS = {
    "type": "object",
    "properties": {"numbers": {"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 20, "maxItems": 20}},
    "required": ["numbers"],
    "additionalProperties": False,
}


@contextmanager
def injected(cluster: Cluster, name: str, trigger: str, body: str) -> Iterator[None]:
    """A Postgres trigger `name` (`trigger`: "BEFORE UPDATE ON responses FOR EACH ROW WHEN (...)") running the
    PL/pgSQL `body` while the block runs: a fault, or a pause that holds the worker at one stage."""
    db_rows(cluster.database_url, f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ {body} $$")
    db_rows(cluster.database_url, f"CREATE TRIGGER {name} {trigger} EXECUTE FUNCTION {name}()")
    try:
        yield
    finally:
        db_rows(cluster.database_url, f"DROP TRIGGER {name} ON {trigger.split(' ON ')[1].split()[0]}")
        db_rows(cluster.database_url, f"DROP FUNCTION {name}")


#: What a worker logs once ready: its id, then its models.
READY_LINE = re.compile(r"worker (worker_\w+) ready: models? ")


def worker_id(worker: ServerProcess, timeout_s: float = 60) -> str:
    """The id a worker registered under (its log says it once ready)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = READY_LINE.search(worker.log_path.read_text(errors="replace"))
        if found is not None:
            return found.group(1)
        time.sleep(0.1)
    raise AssertionError(f"worker never became ready:\n{worker.log_path.read_text()}")
