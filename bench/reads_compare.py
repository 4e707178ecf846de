"""bench/reads.py's figures for two checkouts at once: their servers on one Postgres database, GET one response and
GET the list measured in turn (A B, then B A, ...), so that the machine's drift falls on both alike; the bare
endpoint once a round. How a change to the read path is shown to cost less CPU a request than the commit before.

    .venv/bin/python -m bench.reads_compare OTHER_CHECKOUT [--rounds 3] [--seconds 5] [--connections 16]

OTHER_CHECKOUT is a checkout of this project (a `git worktree`, or `git archive BASE | tar -x -C DIR`): its server
runs this environment's Python with PYTHONPATH set to it. Prints, for each checkout and route, every round's
requests/s (and ÷ bare), p99 and CPU ms a request, and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from app.testing.servers import ServerProcess
from bench.peers import BareApp
from bench.reads import LIST_LIMIT, STORED_RESPONSES, database_url, store_responses, timed_wrk

THIS_CHECKOUT = Path(__file__).resolve().parents[1]
ROUTES = ("get_response", "list_responses")


def compare(other: Path, directory: Path, *, rounds: int, seconds: int, connections: int) -> dict[str, Any]:
    """Each checkout's figures per route and round, the bare endpoint's per round, and the load averages."""
    checkouts = {"other": other.resolve(), "this": THIS_CHECKOUT}
    figures: dict[str, dict[str, list[dict[str, Any]]]] = {name: {route: [] for route in ROUTES} for name in checkouts}
    bare_figures: list[dict[str, Any]] = []
    loads: list[float] = []
    with database_url("postgres", directory) as url:
        servers = {
            name: ServerProcess(
                {"RESPONSES_DATABASE_URL": url, "PYTHONPATH": str(path)}, directory / f"server-{name}.log"
            ).start()
            for name, path in checkouts.items()
        }
        bare = BareApp(directory / "bare.log")
        try:
            ids = store_responses(servers["other"].base_url, STORED_RESPONSES)
            paths = {"get_response": f"/v1/responses/{ids[-1]}", "list_responses": f"/v1/responses?limit={LIST_LIMIT}"}
            for number in range(rounds):
                loads.append(os.getloadavg()[0])
                bare_figure = timed_wrk(f"{bare.base_url}/bare", bare.process.pid, seconds, connections)
                if bare_figure is None:
                    return {"skipped": "wrk is not installed (apt-get install wrk): no read figures"}
                bare_figures.append(bare_figure)
                order = list(checkouts) if number % 2 == 0 else list(checkouts)[::-1]
                for name in order:
                    server = servers[name]
                    assert server.process is not None
                    for route in ROUTES:
                        figure = timed_wrk(f"{server.base_url}{paths[route]}", server.process.pid, seconds, connections)
                        assert figure is not None
                        figures[name][route].append(figure)
        finally:
            for server in servers.values():
                server.stop()
            bare.stop()
    return {"figures": figures, "bare": bare_figures, "load_averages": loads}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("other", type=Path, help="another checkout of this project")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        results = compare(
            args.other, Path(name), rounds=args.rounds, seconds=args.seconds, connections=args.connections
        )
    if "skipped" in results:
        print(results["skipped"])
        return
    bare_rate = statistics.mean(figure["requests_per_s"] for figure in results["bare"])
    bare_cpu = statistics.mean(figure["cpu_ms_per_request"] for figure in results["bare"])
    print(f"bare: {bare_rate:.0f} req/s, CPU {bare_cpu:.2f} ms/request; load averages {results['load_averages']}")
    for checkout, routes in results["figures"].items():
        for route, runs in routes.items():
            print(
                f"{checkout:5} {route:15} req/s {[round(run['requests_per_s']) for run in runs]} "
                f"(÷ bare {[round(run['requests_per_s'] / bare_rate, 2) for run in runs]}), "
                f"p99 ms {[round(run['p99_ms']) for run in runs]}, "
                f"CPU ms/request {[round(run['cpu_ms_per_request'], 2) for run in runs]} "
                f"(median {statistics.median(run['cpu_ms_per_request'] for run in runs):.2f})"
            )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
