"""Streaming speed (issue 14 item 3): tokens/s and time to first token through the openai SDK, over raw
llama_cpp.Llama measured in the same run, embedded and distributed, on the default stored path (store omitted)
and on `store: false`; optionally a py-spy profile of each server while it streams.

    .venv/bin/python -m bench.stream_profile [--tokens 256] [--runs 3] [--no-distributed] [--profile DIR]

Ratios first: api_over_raw (tokens/s, higher is better, 1.0 = as fast as llama.cpp on its own) and
ttft_minus_raw_ms, each the median over runs of one raw stream and one of ours taken right after it; and the
CPU time per token of each server's event loop and of its other threads. With --profile,
`py-spy record --format raw` writes collapsed stacks per server under DIR and their top frames are printed (by
own samples, every thread; idle waits show as select / queue reads).
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
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import llama_cpp
import openai

from app.config import Settings
from app.generation.prompt import ChatMessage
from app.generation.tokenizer import ChatTokenizer
from app.testing.servers import ServerProcess
from bench.peers import ServicesMissing, distributed_cluster
from bench.workloads import PROMPT, StreamTiming, sdk_client, stream_once

THREADS = 2


def stream(client: openai.OpenAI, model: str, tokens: int, *, store: bool) -> StreamTiming:
    """One streamed response as a client sees it; stored: the default path, `store` omitted."""
    return stream_once(client, model, PROMPT, tokens, None if store else False)


class RawPeer:
    """raw llama_cpp.Llama in this process (as bench.peers.raw_stream), kept loaded so that each measurement of
    ours is paired with one of it taken just before: on a busy machine their ratio drifts far less than either."""

    def __init__(self, threads: int) -> None:
        path = Settings().resolved_model_path
        self.prompt = ChatTokenizer(path, n_ctx=None).render([ChatMessage("user", PROMPT)])
        self.llm = llama_cpp.Llama(model_path=str(path), n_ctx=0, n_threads=threads, verbose=False)
        self.stream(16)  # warm-up: the prompt is then in its KV cache, as on the API side

    def stream(self, tokens: int) -> StreamTiming:
        started = time.perf_counter()
        first = last = 0.0
        produced = 0
        for _ in self.llm.create_completion(self.prompt, max_tokens=tokens, temperature=0, stream=True):
            last = time.perf_counter()
            first = first or last
            produced += 1
        return StreamTiming(ttft_s=first - started, deltas=produced, tokens_per_s=(produced - 1) / (last - first))

    def close(self) -> None:
        self.llm.close()


def paired_streams(
    client: openai.OpenAI, model: str, raw: RawPeer, tokens: int, runs: int, *, store: bool, pids: dict[str, int]
) -> dict[str, float]:
    """`runs` pairs (raw, then ours) after a warm-up: the medians of ours / raw tokens/s and of ours - raw time to
    first token, and the CPU each server process's threads spent per token streamed through it (µs; CPU time,
    not wall time, so a busy machine disturbs it far less than it does tokens/s)."""
    stream(client, model, 16, store=store)  # warm-up: the prompt is then in the cache, as on the raw side
    ratios, gaps, rates, ttfts = [], [], [], []
    spent: dict[str, Counter[str]] = {label: Counter() for label in pids}
    produced = 0
    for _ in range(runs):
        peer = raw.stream(tokens)
        before = {label: thread_cpu_ns(pid) for label, pid in pids.items()}
        ours = stream(client, model, tokens, store=store)
        for label, pid in pids.items():
            spent[label].update(
                {thread: ns - before[label].get(thread, 0) for thread, ns in thread_cpu_ns(pid).items()}
            )
        produced += ours.deltas
        ratios.append(ours.tokens_per_s / peer.tokens_per_s)
        gaps.append((ours.ttft_s - peer.ttft_s) * 1000)
        rates.append(ours.tokens_per_s)
        ttfts.append(ours.ttft_s * 1000)
    results = {
        "api_over_raw": round(statistics.median(ratios), 3),
        "ttft_minus_raw_ms": round(statistics.median(gaps), 1),
        "tokens_per_s": round(statistics.median(rates), 1),
        "ttft_ms": round(statistics.median(ttfts), 1),
    }
    for label, threads in spent.items():
        for thread, ns in threads.items():
            results[f"{label}_{thread}_cpu_us_per_token"] = round(ns / produced / 1e3, 1)
    return results


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """CPU time (ns, from /proc schedstat) of a process's event loop (its main thread) and of its other threads
    together (the engine thread and llama.cpp's, database and to_thread workers: Python names none of them for
    the OS, so they cannot be told apart here; py-spy's --threads profile can)."""
    spent: Counter[str] = Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            nanoseconds = int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended meanwhile
        spent["loop" if task.name == str(pid) else "others"] += nanoseconds
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
    base_url: str, pids: dict[str, int], tokens: int, runs: int, raw: RawPeer, profile: Path | None
) -> dict[str, Any]:
    """Stored and store:false streams through `base_url`; with `profile`, each of `pids` (label -> pid) recorded."""
    client = sdk_client(base_url)
    model = client.models.list().data[0].id
    results: dict[str, Any] = {}
    for store in (True, False):
        name = "stored" if store else "store_false"
        outputs = {label: profile / f"{label}-{name}.txt" for label in pids} if profile else {}
        with profiled([(pids[label], output) for label, output in outputs.items()]):
            results[name] = paired_streams(client, model, raw, tokens, runs, store=store, pids=pids)
        for label, output in outputs.items():
            if output.exists():
                results[name][f"{label}_top_frames"] = top_frames(output)
    client.close()
    return results


def embedded(directory: Path, tokens: int, runs: int, raw: RawPeer, profile: Path | None) -> dict[str, Any]:
    env = {"RESPONSES_DATABASE_URL": f"sqlite+aiosqlite:///{directory}/bench.db", "RESPONSES_N_THREADS": str(THREADS)}
    server = ServerProcess(env, directory / "server.log").start()
    try:
        assert server.process is not None
        return measure(server.base_url, {"embedded": server.process.pid}, tokens, runs, raw, profile)
    finally:
        server.stop()


def distributed(directory: Path, tokens: int, runs: int, raw: RawPeer, profile: Path | None) -> dict[str, Any]:
    """An API node and a worker on Postgres and Redis."""
    try:
        with distributed_cluster(directory, THREADS) as cluster:
            return measure(cluster.api.base_url, cluster.pids, tokens, runs, raw, profile)
    except ServicesMissing as error:
        return {"skipped": str(error)}


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
    raw = RawPeer(THREADS)
    results: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        "tokens": args.tokens,
    }
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        results["embedded"] = embedded(directory, args.tokens, args.runs, raw, args.profile)
        if not args.no_distributed:
            results["distributed"] = distributed(directory, args.tokens, args.runs, raw, args.profile)
    raw.close()
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
