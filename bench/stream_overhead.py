"""What the server costs between the engine's `emit` and the socket, without the model (issue 14 item 3).

A scripted engine thread stands in for llama.cpp (it emits one word a "token", `--interval-ms` apart) behind the
real LocalRunner, InProcessQueue, execution, relay and SSE path of a real `uvicorn` server process; a raw httpx
client streams from it. With no decode in the way, every figure is our own cost:

  - server CPU per streamed token (µs; CPU time of the whole server process, so a busy machine disturbs it less
    than wall time), on the stored path (store omitted) and on `store: false`;
  - time to first token (ms): request sent -> first text delta received, the engine emitting at once;
  - the ceiling: tokens/s of one stream when the engine emits as fast as it can (`--interval-ms 0`);
  - with `--calls`, Python function calls per token on the event loop (cProfile, switched on in the server by a
    signal for extra streams after the timed ones): a count, not a time, so another process's load does not move
    it; what a change to the per-token path saves shows here even when the CPU figures drown in noise;
  - with `--tools`, each request offers a function tool, so that the output's parser (our convention's, Hermes)
    reads every token for call markup, as it does for a request with tools.

    .venv/bin/python -m bench.stream_overhead [--tokens 512] [--runs 5] [--interval-ms 5] [--calls] [--tools]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from app.config import Settings
from app.generation.engine import GenerationRequest
from app.generation.local_runner import LocalRunner
from app.generation.types import Finish, FinishReason
from app.main import create_app
from app.testing.fakes import FakeRenderer, fake_generation
from app.testing.servers import free_port, wait_for_ok

WORD = " bread"
#: The tool a `--tools` request offers (never called: the scripted engine says WORD).
TOOL = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


class ScriptedEngine:
    """LlamaEngine's interface to LocalRunner: one thread emitting `max_output_tokens` pieces per request."""

    slots = 4
    cached_bytes = 0

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._requests: queue.SimpleQueue[GenerationRequest | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="llama-engine", daemon=True)
        self._thread.start()

    def submit(self, request: GenerationRequest) -> None:
        self._requests.put(request)

    def tokenize(self, text: str) -> list[int]:
        return [len(word) for word in text.split()]

    def close(self) -> None:
        self._requests.put(None)
        self._thread.join()

    def _run(self) -> None:
        while (request := self._requests.get()) is not None:
            count = request.sampling.max_output_tokens or 16
            produced = 0
            while produced < count and not request.cancelled.is_set():
                if self.interval_s and produced:
                    time.sleep(self.interval_s)
                request.emit(WORD)
                produced += 1
            reason: FinishReason = "cancelled" if request.cancelled.is_set() else "length"
            request.emit(Finish(reason, len(request.prompt), 0, produced))


def serve(port: int, database_url: str, interval_s: float, calls: Path | None) -> None:
    if calls is not None:  # SIGUSR1 starts counting the event loop's calls, SIGUSR2 writes them to `calls`
        profiler = cProfile.Profile()

        def stop(*_: object) -> None:
            profiler.disable()
            profiler.dump_stats(calls)
            profiler.clear()

        signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
        signal.signal(signal.SIGUSR2, stop)
    settings = Settings(database_url=database_url, model_id="scripted", _env_file=None)
    factory = fake_generation(FakeRenderer(n_ctx=100_000), LocalRunner(ScriptedEngine(interval_s)))  # type: ignore[arg-type]
    uvicorn.run(create_app(settings, factory), host="127.0.0.1", port=port, log_level="warning")


def cpu_ns(pid: int) -> tuple[int, int]:
    """CPU time (ns, /proc schedstat) so far of `pid`'s every thread, and of its main thread (the event loop)."""
    total = loop = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            spent = int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += spent
        loop += spent if task.name == str(pid) else 0
    return total, loop


def stream(client: httpx.Client, tokens: int, *, store: bool, tools: bool = False) -> tuple[float, float, int]:
    """(time to first text delta, time from it to the last, text deltas) of one streamed response."""
    body: dict[str, Any] = {"model": "scripted", "input": "Bake bread.", "max_output_tokens": tokens, "stream": True}
    if not store:
        body["store"] = False
    if tools:
        body["tools"] = [TOOL]
    started = time.perf_counter()
    first = last = 0.0
    deltas = 0
    with client.stream("POST", "/v1/responses", json=body) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if line == "event: response.output_text.delta":
                last = time.perf_counter()
                first = first or last
                deltas += 1
    return first - started, last - first, deltas


def measure(
    base_url: str, pid: int, tokens: int, runs: int, *, store: bool, calls: Path | None = None, tools: bool = False
) -> dict[str, float]:
    with httpx.Client(base_url=base_url, timeout=120) as client:
        stream(client, 16, store=store, tools=tools)  # warm-up
        before = cpu_ns(pid)
        timings = [stream(client, tokens, store=store, tools=tools) for _ in range(runs)]
        after = cpu_ns(pid)
        # Time to first token on short responses, apart: a long stream's tail would not delay it anyway.
        ttfts = [stream(client, 16, store=store, tools=tools)[0] for _ in range(runs * 2)]
        counted = count_calls(client, pid, tokens, runs, store=store, calls=calls, tools=tools) if calls else None
    produced = sum(deltas for _, _, deltas in timings)
    results = {
        "server_cpu_us_per_token": round((after[0] - before[0]) / produced / 1e3, 1),
        "loop_cpu_us_per_token": round((after[1] - before[1]) / produced / 1e3, 1),
        "ttft_ms": round(statistics.median(ttfts) * 1000, 2),
        "tokens_per_s": round(statistics.median((deltas - 1) / span for _, span, deltas in timings), 1),
    }
    if counted is not None:
        results["loop_python_calls_per_token"] = counted
    return results


def count_calls(
    client: httpx.Client, pid: int, tokens: int, runs: int, *, store: bool, calls: Path, tools: bool = False
) -> float:
    """Python calls per streamed token on the server's event loop, over `runs` more streams (whole requests:
    their first and last events are in it, a 512-token stream's share of them is small)."""
    calls.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    time.sleep(0.2)  # the loop runs the handler when it wakes
    produced = sum(stream(client, tokens, store=store, tools=tools)[2] for _ in range(runs))
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while not calls.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.2)  # written whole
    total: int = pstats.Stats(str(calls)).total_calls  # type: ignore[attr-defined]
    return round(total / produced, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--interval-ms", type=float, default=5.0, help="between pieces (0: as fast as it can)")
    parser.add_argument("--flood", action="store_true", help="also as fast as the engine can emit")
    parser.add_argument("--calls", action="store_true", help="also Python calls per token on the event loop")
    parser.add_argument("--tools", action="store_true", help="each request offers a function tool")
    parser.add_argument("--calls-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help="default: a fresh SQLite file")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.database_url, args.interval_ms / 1000, args.calls_file)
        return
    results: dict[str, Any] = {"machine": f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"}
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        database_url = args.database_url or f"sqlite+aiosqlite:///{directory}/bench.db"
        for interval_ms in dict.fromkeys((args.interval_ms, 0.0) if args.flood else (args.interval_ms,)):
            port = free_port()
            command = [sys.executable, "-m", "bench.stream_overhead", "--serve", str(port)]
            command += ["--interval-ms", str(interval_ms), "--database-url", database_url]
            calls = directory / "calls.prof" if args.calls else None
            command += ["--calls-file", str(calls)] if calls else []
            with (directory / "server.log").open("ab") as log:
                process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            try:
                base_url = f"http://127.0.0.1:{port}"
                if not wait_for_ok(f"{base_url}/health", timeout_s=60):
                    raise RuntimeError((directory / "server.log").read_text()[-3000:])
                results[f"interval_{interval_ms:g}ms"] = {
                    ("stored" if store else "store_false"): measure(
                        base_url, process.pid, args.tokens, args.runs, store=store, calls=calls, tools=args.tools
                    )
                    for store in (True, False)
                }
            finally:
                process.terminate()
                process.wait(timeout=30)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
