"""Streaming speed (issue 14 item 3): tokens/s and time to first token through the openai SDK, over raw
llama_cpp.Llama measured in the same run, embedded and distributed, on the default stored path (store omitted)
and on `store: false`; optionally a py-spy profile of each server while it streams.

    .venv/bin/python -m bench.stream_profile [--tokens 256] [--runs 3] [--no-distributed] [--profile DIR]

Ratios first: api_over_raw (tokens/s, higher is better, 1.0 = as fast as llama.cpp on its own) and
ttft_minus_raw_ms. With --profile, `py-spy record --format raw` writes collapsed stacks per server under DIR and
the top frames (by own samples, over every thread) are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import openai
import redis

from bench.peers import raw_stream
from bench.workloads import PROMPT, StreamTiming, sdk_client
from tests.fixtures.databases import fresh_postgres_database
from tests.fixtures.server import ServerProcess, run_cli, wait_until_ready

THREADS = 2
DEFAULT_BENCH_REDIS_URL = "redis://127.0.0.1:6379/10"


def stream(client: openai.OpenAI, model: str, tokens: int, *, store: bool) -> StreamTiming:
    """One streamed response as a client sees it: time to the first text delta, then the delta rate."""
    started = time.perf_counter()
    first = last = 0.0
    deltas = 0
    extra: dict[str, Any] = {} if store else {"store": False}  # stored: the default, store omitted
    with client.responses.create(
        model=model, input=PROMPT, temperature=0, max_output_tokens=tokens, stream=True, **extra
    ) as events:
        for event in events:
            if event.type == "response.output_text.delta":
                last = time.perf_counter()
                first = first or last
                deltas += 1
    rate = (deltas - 1) / (last - first) if deltas > 1 else 0.0
    return StreamTiming(ttft_s=first - started, deltas=deltas, tokens_per_s=rate)


def median_stream(
    client: openai.OpenAI, model: str, tokens: int, runs: int, *, store: bool, pids: dict[str, int]
) -> tuple[StreamTiming, dict[str, float]]:
    """The median of `runs` streams after a warm-up, and the CPU each process's threads spent per streamed token
    (µs; CPU time, not wall time, so a busy machine disturbs it far less than it does tokens/s)."""
    stream(client, model, 16, store=store)  # warm-up: the prompt is then in the cache, as on the raw side
    before = {label: thread_cpu_ns(pid) for label, pid in pids.items()}
    timings = [stream(client, model, tokens, store=store) for _ in range(runs)]
    produced = sum(t.deltas for t in timings)
    cpu: dict[str, float] = {}
    for label, pid in pids.items():
        after = thread_cpu_ns(pid)
        for thread, spent in after.items():
            used = spent - before[label].get(thread, 0)
            cpu[f"{label}_{thread}_cpu_us_per_token"] = round(used / produced / 1e3, 1)
    timing = StreamTiming(
        ttft_s=statistics.median(t.ttft_s for t in timings),
        deltas=timings[0].deltas,
        tokens_per_s=statistics.median(t.tokens_per_s for t in timings),
    )
    return timing, cpu


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """CPU time (ns, from /proc schedstat) of a process's threads by kind: its event loop (the main thread), its
    llama.cpp engine thread, Python worker threads, and the rest."""
    spent: Counter[str] = Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            nanoseconds = int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended meanwhile
        if task.name == str(pid):
            thread = "loop"
        elif name == "llama-engine":
            thread = "engine"
        elif name.startswith(("asyncio_", "Thread-")):
            thread = "workers"  # aiosqlite's connection threads, to_thread's pool
        else:
            thread = "others"  # llama.cpp's compute threads, Redis/metrics helpers
        spent[thread] += nanoseconds
    return dict(spent)


@contextmanager
def profiled(targets: list[tuple[int, Path]]) -> Iterator[None]:
    """py-spy recording each (pid, output) while the block runs (every thread; `--idle` left out)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not targets or not Path(spy).exists():
        yield
        return
    processes = [
        subprocess.Popen(
            [spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "250", "-o", str(output)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid, output in targets
    ]
    time.sleep(1.0)  # py-spy attaches
    try:
        yield
    finally:
        for process in processes:
            process.send_signal(signal.SIGINT)  # py-spy writes what it recorded
        for process in processes:
            process.wait(timeout=60)


def top_frames(collapsed: Path, count: int = 15) -> list[tuple[str, float]]:
    """The functions with the most own samples (the last frame of each stack), as shares of all samples."""
    own: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if not stack:
            continue
        total += int(samples)
        own[stack.split(";")[-1]] += int(samples)
    return [(frame, round(samples / total, 3)) for frame, samples in own.most_common(count)] if total else []


def measure(
    base_url: str, pids: dict[str, int], tokens: int, runs: int, raw: StreamTiming, profile: Path | None
) -> dict[str, Any]:
    """Stored and store:false streams through `base_url`; with `profile`, each of `pids` (label -> pid) recorded."""
    client = sdk_client(base_url)
    model = client.models.list().data[0].id
    results: dict[str, Any] = {}
    for store in (True, False):
        name = "stored" if store else "store_false"
        outputs = {label: profile / f"{label}-{name}.txt" for label in pids} if profile else {}
        with profiled([(pids[label], output) for label, output in outputs.items()]):
            timing, cpu = median_stream(client, model, tokens, runs, store=store, pids=pids)
        results[name] = {
            "api_over_raw": round(timing.tokens_per_s / raw.tokens_per_s, 3),
            "ttft_minus_raw_ms": round((timing.ttft_s - raw.ttft_s) * 1000, 1),
            "tokens_per_s": round(timing.tokens_per_s, 1),
            "ttft_ms": round(timing.ttft_s * 1000, 1),
            **cpu,
        }
        for label, output in outputs.items():
            if output.exists():
                results[name][f"{label}_top_frames"] = top_frames(output)
    client.close()
    return results


def embedded(directory: Path, tokens: int, runs: int, raw: StreamTiming, profile: Path | None) -> dict[str, Any]:
    env = {"RESPONSES_DATABASE_URL": f"sqlite+aiosqlite:///{directory}/bench.db", "RESPONSES_N_THREADS": str(THREADS)}
    server = ServerProcess(env, directory / "server.log").start()
    try:
        assert server.process is not None
        return measure(server.base_url, {"embedded": server.process.pid}, tokens, runs, raw, profile)
    finally:
        server.stop()


def distributed(directory: Path, tokens: int, runs: int, raw: StreamTiming, profile: Path | None) -> dict[str, Any]:
    """An API node and a worker on Postgres and Redis."""
    redis_url = os.environ.get("RESPONSES_BENCH_REDIS_URL", DEFAULT_BENCH_REDIS_URL)
    with ExitStack() as stack:
        try:
            with redis.Redis.from_url(redis_url) as connection:
                connection.flushdb()
            database_url = stack.enter_context(fresh_postgres_database())
        except Exception as error:
            return {"skipped": str(error)}
        env = {
            "RESPONSES_DATABASE_URL": database_url,
            "RESPONSES_REDIS_URL": redis_url,
            "RESPONSES_N_THREADS": str(THREADS),
        }
        assert run_cli(["migrate"], env).returncode == 0
        worker = ServerProcess(env, directory / "worker.log", command=["worker"]).start()
        stack.callback(worker.stop)
        api = ServerProcess(env, directory / "api.log").start()
        stack.callback(api.stop)
        wait_until_ready(api.base_url)
        assert worker.process is not None and api.process is not None
        pids = {"api_node": api.process.pid, "worker": worker.process.pid}
        return measure(api.base_url, pids, tokens, runs, raw, profile)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-distributed", action="store_true")
    parser.add_argument("--profile", type=Path, help="write py-spy collapsed stacks here and print top frames")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    raw = raw_stream(THREADS, args.tokens)
    results: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        "tokens": args.tokens,
        "raw": {"tokens_per_s": round(raw.tokens_per_s, 1), "ttft_ms": round(raw.ttft_s * 1000, 1)},
    }
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        results["embedded"] = embedded(directory, args.tokens, args.runs, raw, args.profile)
        if not args.no_distributed:
            results["distributed"] = distributed(directory, args.tokens, args.runs, raw, args.profile)
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
