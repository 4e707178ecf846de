"""Class shares (issue 37, finding 5): tenant Y's background throughput while tenant X floods foreground creates,
as a ratio to Y's throughput alone, both measured in the same run, in embedded or distributed mode.

    .venv/bin/python -m bench.class_shares [--mode embedded|distributed] [--jobs 4] [--loops 6] [--tokens 16]

Starts this checkout's server (embedded: one process on SQLite; distributed: a private Postgres and Redis, an API
node and a worker), the shipped SmolLM2 model, 2 threads, with two keys. Y queues --jobs background creates
(--tokens output tokens each) and the time until all have ended is taken, alone; then X starts --loops threads of
short foreground creates, each sent as soon as the last is answered, and once every loop has had one answered Y
queues the same work again, timed the same way. Prints both times, the throughput ratio (alone / beside the flood;
the goal at equal weights: >= 0.5) and how many of X's creates were answered meanwhile. Before class shares, Y's
background work waited for the flood to stop (0 of 4 done in 101 s, 4 in 3 s alone).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from app.testing.cluster import private_cluster
from app.testing.servers import ServerProcess, wait_until_ready

KEYS = ("flood-key", "background-key")
ENDED = ("completed", "incomplete", "failed", "cancelled")
BOUND_S = 900.0


def headers(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def background_run_s(http: httpx.Client, jobs: int, tokens: int) -> float:
    """Seconds from queueing Y's `jobs` background creates to the last one's end."""
    started = time.perf_counter()
    ids = []
    for index in range(jobs):
        body = {"input": f"Count to {index + 3}.", "background": True, "max_output_tokens": tokens, "temperature": 0}
        reply = http.post("/v1/responses", json=body, headers=headers(KEYS[1]))
        reply.raise_for_status()
        ids.append(reply.json()["id"])
    pending = set(ids)
    while pending and time.perf_counter() - started < BOUND_S:
        for response_id in list(pending):
            status = http.get(f"/v1/responses/{response_id}", headers=headers(KEYS[1])).json()["status"]
            if status in ENDED:
                pending.discard(response_id)
        time.sleep(0.05)
    if pending:
        raise RuntimeError(f"{len(pending)} of Y's background responses did not end within {BOUND_S} s")
    return time.perf_counter() - started


class Flood:
    """X's loops of short foreground creates."""

    def __init__(self, base_url: str, loops: int, tokens: int) -> None:
        self.base_url, self.tokens = base_url, tokens
        self.answered = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(loops)]

    def _loop(self) -> None:
        body = {"input": "Say hi.", "max_output_tokens": self.tokens, "temperature": 0, "store": False}
        with httpx.Client(base_url=self.base_url, timeout=BOUND_S) as http:
            while not self.stop.is_set():
                http.post("/v1/responses", json=body, headers=headers(KEYS[0])).raise_for_status()
                with self.lock:
                    self.answered += 1

    def __enter__(self) -> Flood:
        for thread in self.threads:
            thread.start()
        deadline = time.monotonic() + BOUND_S
        while self.answered < len(self.threads) and time.monotonic() < deadline:
            time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(BOUND_S)


def process(env: dict[str, str], log_path: Path, command: list[str] | None = None) -> ServerProcess:
    """This checkout's `llama-responses` (whatever is installed), started."""
    return ServerProcess(env, log_path, command, cli=Path("app.cli"), wrapper=[sys.executable, "-m"]).start()


@contextlib.contextmanager
def server(mode: str, directory: Path) -> Iterator[str]:
    """The base URL of this checkout's server in `mode`, with the two keys."""
    env = {"RESPONSES_API_KEYS": ",".join(KEYS)}
    if mode == "embedded":
        env["RESPONSES_DATABASE_URL"] = f"sqlite+aiosqlite:///{directory / 'shares.db'}"
        node = process(env, directory / "server.log")
        try:
            wait_until_ready(node.base_url, 120)
            yield node.base_url
        finally:
            node.stop()
        return
    with private_cluster(directory) as (cluster, _, _):
        worker = process(cluster.env(), directory / "worker.log", ["worker"])
        api = process({**cluster.env(), **env}, directory / "api.log")
        try:
            wait_until_ready(api.base_url, 120)
            yield api.base_url
        finally:
            api.stop()
            worker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("embedded", "distributed"), default="embedded")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--loops", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as directory,
        server(args.mode, Path(directory)) as base_url,
        httpx.Client(base_url=base_url, timeout=BOUND_S) as http,
    ):
        background_run_s(http, 1, args.tokens)  # the model loaded, the first prompt read: not timed
        alone_s = background_run_s(http, args.jobs, args.tokens)
        with Flood(base_url, args.loops, args.tokens) as flood:
            before = flood.answered
            beside_s = background_run_s(http, args.jobs, args.tokens)
            answered = flood.answered - before
    print(
        json.dumps(
            {
                "mode": args.mode,
                "background_jobs": args.jobs,
                "flood_loops": args.loops,
                "alone_s": round(alone_s, 2),
                "beside_flood_s": round(beside_s, 2),
                "throughput_ratio": round(alone_s / beside_s, 3),
                "flood_creates_meanwhile": answered,
            }
        )
    )


if __name__ == "__main__":
    main()
