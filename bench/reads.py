"""Read throughput (issue 14, item 4): GET /v1/responses/{id} and GET /v1/responses?limit=20 under wrk, on SQLite
and on Postgres, each divided by a bare FastAPI endpoint (bench/bare_app.py) measured in the same run.

    .venv/bin/python -m bench.reads [--databases sqlite,postgres] [--seconds 5] [--connections 16] [--json FILE]

The server is `llama-responses serve` in embedded mode on the database named (Postgres: a fresh database on
RESPONSES_TEST_POSTGRES_URL's server, migrated); it stores STORED_RESPONSES responses through the API first, so
that the list reads a full page. The bare endpoint is measured just before and just after each database's pair
of figures, and the ratios divide by the mean of the two: the machine's load drifts within a run. Each figure
also gives the serving process's CPU time per request (from /proc), and bare's over ours: on a loaded machine
that ratio is the steadier one (the database server's own CPU is not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.testing.databases import fresh_postgres_database, sqlite_url
from app.testing.servers import ServerProcess, run_cli, sdk_client
from bench.peers import BareApp, wrk

DATABASES = ("sqlite", "postgres")
#: More than a page, so that the list route reads a full one (and says has_more).
STORED_RESPONSES = 25
LIST_LIMIT = 20
CREATING_AT_ONCE = 4
#: The issue's target on Postgres: requests/s over the bare endpoint's, and p99 at 16 connections.
TARGET_RATIO = 0.35
TARGET_P99_MS = 20.0


@contextmanager
def database_url(kind: str, directory: Path) -> Iterator[str]:
    """A fresh, migrated database of `kind` for one server."""
    if kind == "sqlite":
        folder = directory / "sqlite"
        folder.mkdir(exist_ok=True)
        yield sqlite_url(folder)
        return
    with fresh_postgres_database() as url:
        migrated = run_cli(["migrate"], {"RESPONSES_DATABASE_URL": url})
        if migrated.returncode != 0:
            raise RuntimeError(f"migrate failed:\n{migrated.stderr}")
        yield url


def store_responses(base_url: str, count: int) -> list[str]:
    """`count` short stored responses, created through the API as clients would (a few at once, which the
    engine batches); their ids, in the order they were asked for."""
    with sdk_client(base_url) as client, ThreadPoolExecutor(CREATING_AT_ONCE) as pool:
        model = client.models.list().data[0].id

        def create(number: int) -> str:
            return client.responses.create(model=model, input=f"Say the number {number}.", max_output_tokens=16).id

        return list(pool.map(create, range(count)))


def cpu_s(pid: int) -> float:
    """CPU time (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_wrk(url: str, pid: int, seconds: int, connections: int) -> dict[str, Any] | None:
    """wrk's figures plus the serving process's CPU time per request, in ms: on a loaded machine requests/s
    measure the share of the CPU the process got as much as its cost; CPU per request measures the cost alone
    (the database server's share excluded)."""
    before = cpu_s(pid)
    figure = wrk(url, seconds, connections)
    if figure is None or not figure["requests_per_s"]:
        return figure
    used = cpu_s(pid) - before
    return {**figure, "cpu_ms_per_request": 1000 * used / (figure["requests_per_s"] * seconds)}


def _ratio(figure: dict[str, Any] | None, bare: dict[str, float]) -> dict[str, Any] | None:
    if figure is None:
        return None
    return {
        **figure,
        "over_bare": figure["requests_per_s"] / bare["requests_per_s"],
        "bare_cpu_over_cpu": bare["cpu_ms_per_request"] / figure["cpu_ms_per_request"],
    }


def measure(kind: str, directory: Path, bare: BareApp, seconds: int, connections: int) -> dict[str, Any]:
    """GET one and GET the list on a server over a database of `kind`, between two figures of the bare app."""
    with database_url(kind, directory) as url:
        server = ServerProcess({"RESPONSES_DATABASE_URL": url}, directory / f"server-{kind}.log").start()
        assert server.process is not None
        try:
            ids = store_responses(server.base_url, STORED_RESPONSES)
            before = timed_wrk(f"{bare.base_url}/bare", bare.process.pid, seconds, connections)
            one = timed_wrk(f"{server.base_url}/v1/responses/{ids[-1]}", server.process.pid, seconds, connections)
            page = timed_wrk(
                f"{server.base_url}/v1/responses?limit={LIST_LIMIT}", server.process.pid, seconds, connections
            )
            after = timed_wrk(f"{bare.base_url}/bare", bare.process.pid, seconds, connections)
        finally:
            server.stop()
    if before is None or after is None:
        return {"skipped": "wrk is not installed (apt-get install wrk): no read figures"}
    bare_figure = {key: (before[key] + after[key]) / 2 for key in ("requests_per_s", "cpu_ms_per_request")}
    get_one = _ratio(one, bare_figure)
    result: dict[str, Any] = {
        "bare_fastapi": {**bare_figure, "before": before, "after": after},
        "get_response": get_one,
        "list_responses": _ratio(page, bare_figure),
    }
    if kind == "postgres" and get_one is not None:
        result["target_met"] = get_one["over_bare"] >= TARGET_RATIO and get_one["p99_ms"] < TARGET_P99_MS
    return result


def bench_reads(
    directory: Path, databases: tuple[str, ...] = DATABASES, *, seconds: int = 5, connections: int = 16
) -> dict[str, Any]:
    """The read figures for each of `databases`: requests/s, p99 and the ratio over the bare endpoint. A database
    that cannot be had (no Postgres server) is reported as skipped, with why; the others still run."""
    results: dict[str, Any] = {"connections": connections, "seconds": seconds}
    bare = BareApp(directory / "bare.log")
    try:
        for kind in databases:
            try:
                results[kind] = measure(kind, directory, bare, seconds, connections)
            except OSError as error:  # no Postgres to connect to
                results[kind] = {"skipped": f"{kind} unavailable: {error}"}
    finally:
        bare.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--databases", default=",".join(DATABASES), help="comma-separated: sqlite, postgres")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    kinds = tuple(kind.strip() for kind in args.databases.split(",") if kind.strip())
    unknown = set(kinds) - set(DATABASES)
    if unknown:
        parser.error(f"unknown database(s): {', '.join(sorted(unknown))}")
    with tempfile.TemporaryDirectory() as name:
        results = bench_reads(Path(name), kinds, seconds=args.seconds, connections=args.connections)
    for kind in kinds:
        figures = results[kind]
        if "skipped" in figures:
            print(f"{kind}: skipped ({figures['skipped']})")
            continue
        for route in ("get_response", "list_responses"):
            figure = figures[route]
            print(
                f"{kind:8} {route:15} {figure['requests_per_s']:6.0f} req/s  p99 {figure['p99_ms']:6.1f} ms  "
                f"{figure['over_bare']:.2f} of bare ({figures['bare_fastapi']['requests_per_s']:.0f} req/s); "
                f"CPU {figure['cpu_ms_per_request']:.2f} ms/request, bare's / ours "
                f"{figure['bare_cpu_over_cpu']:.2f}" + (f"  {figure['errors']} non-2xx" if figure["errors"] else "")
            )
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
