"""Every speed figure of issue 14 in one run, side by side: ours on the default stored path (`store` omitted),
ours with `store: false`, and llama.cpp's own llama-server, on the shipped model with the same threads.

    .venv/bin/python -m bench.run [--only stream,concurrency,...] [--tokens 128] [--json results.json]
                                  [--llama-server PATH] [--no-distributed] [--profile DIR] [--quick] [--gpu]
    .venv/bin/python -m bench.run --table results.json      # the table again, from a saved run

--gpu (a CUDA build on every side: bench/gpu/run.sh): every layer offloaded on all three sides, 1, 8 and 32
concurrent streams, and 32 sequences of the same context on ours and on llama-server.

Prints the table first (ratios, targets, met?), a note on what limits each figure that misses, what was left out
and why, then the JSON. Parts (--only):
  stream         streamed tokens/s of one stream, and time to first token, over raw llama_cpp.Llama
  concurrency    aggregate tokens/s of 1, 2, 4, 8 concurrent streams
  conversations  8 interleaved conversations x 8 turns (chained; stateless resending the history): turn 8 / turn 1
                 and prompt tokens read per turn
  ttft           time to first token over raw llama.cpp, distributed (API node + worker on Postgres and Redis)
  reads          GET /v1/responses/{id} and the list, over a bare FastAPI endpoint, on SQLite and Postgres (wrk)
  memory         RSS of each process, KV memory reserved per sequence
  stall          the largest gap a running stream sees while a ~4,000-token prompt is read
  cancel         POST /cancel on a generating background response until it returns the stopped one
  costs          per request and per token, distributed: API node and worker CPU, Redis publishes and commands,
                 Postgres write transactions and rows (bench/costs.py; the capacity note's inputs)
  events         a background stream's database writes per token, and the event rate one Postgres takes
                 (bench/event_writes.py)
  engine         the pause a 7.6k-token prompt's finish (its prefix saved) puts on a running stream
                 (bench/prefix_save.py)
  pool           one KV pool of today's 4 sequences' cells: how many conversations it holds, aggregate tokens/s at
                 8, 16 and 32 streams and 16 conversations' turn 8 / turn 1, ours and llama-server
                 (bench/kv_pool.py)
  prefill        prefill tokens/s of 2k, 8k and 16k-token prompts, ours, llama-server's and raw llama.cpp's
                 (bench/prefill.py)
llama-server figures need its binary (bench/build_llama_server.sh); distributed ones Postgres and Redis
(RESPONSES_TEST_POSTGRES_URL, RESPONSES_BENCH_REDIS_URL; the local services by default); reads need wrk.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import openai

from app.config import Settings
from app.jobs import event_batches
from app.testing.servers import ServerProcess
from bench import event_writes, stream_profile
from bench.costs import request_costs
from bench.figures import figures_from
from bench.peers import (
    BareApp,
    LlamaServer,
    ServicesMissing,
    distributed_cluster,
    kv_bytes_per_token,
    raw_stream,
    wrk,
)
from bench.report import format_table
from bench.workloads import best_stream, cancel_latency, concurrent_streams, conversations, sdk_client, stall

THREADS = 2
DEFAULT_LLAMA_SERVER = Path.home() / ".cache/llama-responses/llama-server-11434.0.0/build/bin/llama-server"
#: Ours on the default stored path (store omitted), then with store: false.
PATHS: dict[str, bool | None] = {"stored": None, "unstored": False}

PARTS = (
    "stream",
    "concurrency",
    "conversations",
    "ttft",
    "reads",
    "memory",
    "stall",
    "cancel",
    "costs",
    "events",
    "engine",
    "pool",
    "prefill",
)
EMBEDDED_PARTS = {"stream", "concurrency", "conversations", "reads", "memory", "stall", "cancel"}
DISTRIBUTED_PARTS = {"ttft", "memory", "costs"}
PEER_PARTS = {"stream", "concurrency", "conversations", "memory", "stall"}
MB = 2**20


@dataclass(frozen=True)
class Sizes:
    """How much each workload does. --quick shrinks all of them (to 16 output tokens at least: the API rejects
    fewer) to check the harness on a busy machine in a few minutes: its figures mean nothing."""

    tokens: int = 128
    stream_counts: tuple[int, ...] = (1, 2, 4, 8)
    concurrent_tokens: int = 64
    conversations: int = 8
    turns: int = 8
    stall_sentences: int = 240
    event_tokens: int = 200
    event_seconds: float = 3.0


#: Sequences decoded together on a GPU, ours and llama-server's: the most concurrent streams a --gpu run has.
GPU_SLOTS = 32
GPU_SIZES = Sizes(stream_counts=(1, 8, GPU_SLOTS))
QUICK = Sizes(
    tokens=16,
    stream_counts=(1, 8),
    concurrent_tokens=16,
    conversations=2,
    turns=3,
    stall_sentences=30,
    event_tokens=32,
    event_seconds=0.5,
)
#: The event rate one Postgres takes: by 1 and by 32 concurrent writers, in batches of EVENT_BATCH events.
EVENT_WRITERS = [1, 32]
EVENT_BATCH = 32

#: Figures other lanes measure in their own modules: part -> [(module, function, lane)]. Each function takes
#: the run's scratch directory and returns a dict with a "figures" list in the table's shape (bench/figures.py);
#: a module not on this branch yet is reported as left out.
PLUGINS: dict[str, list[tuple[str, str, str]]] = {
    "engine": [("bench.prefix_save", "measure", "engine")],
    "pool": [("bench.kv_pool", "measure", "kv-pool")],
    "prefill": [("bench.prefill", "measure", "prefill")],
}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def model_of(client: openai.OpenAI) -> str:
    return client.models.list().data[0].id


def scaling(client: openai.OpenAI, model: str, store: bool | None, sizes: Sizes) -> dict[str, float]:
    return {
        str(count): concurrent_streams(client, model, count, sizes.concurrent_tokens, store)
        for count in sizes.stream_counts
    }


def talks(client: openai.OpenAI, model: str, sizes: Sizes, *, chained: bool) -> dict[str, Any]:
    return conversations(client, model, chained=chained, conversations=sizes.conversations, turns=sizes.turns)


def timing(client: openai.OpenAI, model: str, tokens: int, store: bool | None) -> dict[str, float]:
    measured = best_stream(client, model, tokens, store)
    return {"tokens_per_s": measured.tokens_per_s, "ttft_ms": measured.ttft_s * 1000}


def profiled_timing(
    results: dict[str, Any], label: str, pids: dict[str, int], client: openai.OpenAI, model: str, tokens: int
) -> dict[str, dict[str, float]]:
    """`timing` on each path; with --profile, py-spy records each of `pids` (name -> pid) meanwhile
    (bench/stream_profile.py) and the top frames by own samples go to results["profiles"]."""
    folder = Path(results["profile_dir"]) if "profile_dir" in results else None
    timings = {}
    for path, store in PATHS.items():
        outputs = {name: folder / f"{label}-{name}-{path}.txt" for name in pids} if folder else {}
        with stream_profile.profiled([(pids[name], output) for name, output in outputs.items()]):
            timings[path] = timing(client, model, tokens, store)
        for name, output in outputs.items():
            if output.exists():
                results.setdefault("profiles", {})[f"{label} {name}, {path}"] = stream_profile.top_frames(output, 5)
    return timings


def wrk_reads(base_url: str, bare_url: str) -> dict[str, Any] | None:
    """GET one stored response and a page of the list, over the bare endpoint (bench/reads.py's shape)."""
    bare = wrk(f"{bare_url}/bare")
    client = sdk_client(base_url)
    stored = client.responses.create(model=model_of(client), input="Hi!", max_output_tokens=16)
    client.close()
    one = wrk(f"{base_url}/v1/responses/{stored.id}")
    page = wrk(f"{base_url}/v1/responses?limit=20")
    if bare is None or one is None or page is None:
        return None
    over = bare["requests_per_s"]
    return {
        "bare_fastapi": bare,
        "get_response": {**one, "over_bare": one["requests_per_s"] / over},
        "list_responses": {**page, "over_bare": page["requests_per_s"] / over},
    }


def gpu_env(gpu: bool) -> dict[str, str]:
    """Our engine's settings for a --gpu run: every layer offloaded, GPU_SLOTS sequences (8 by default)."""
    return {"RESPONSES_N_GPU_LAYERS": "-1", "RESPONSES_WORKER_CONCURRENCY": str(GPU_SLOTS)} if gpu else {}


@contextmanager
def embedded_server(directory: Path, gpu: bool = False) -> Iterator[ServerProcess]:
    env = {"RESPONSES_DATABASE_URL": f"sqlite+aiosqlite:///{directory}/bench.db", "RESPONSES_N_THREADS": str(THREADS)}
    server = ServerProcess({**env, **gpu_env(gpu)}, directory / "server.log").start()
    try:
        yield server
    finally:
        server.stop()


def ours_n_ctx() -> int:
    """The context each of our sequences has: SmolLM2's training context when n_ctx is unset, as the engine takes."""
    return Settings().n_ctx or 8192


def ours_kv_mb_per_sequence() -> float:
    """Today's layout: every sequence reserves a window of n_ctx cells of its own (app/generation/engine.py)."""
    return kv_bytes_per_token() * ours_n_ctx() / MB


def bench_embedded(results: dict[str, Any], parts: set[str], directory: Path, sizes: Sizes, gpu: bool) -> None:
    with embedded_server(directory, gpu) as server, sdk_client(server.base_url) as client:
        model = model_of(client)
        if "stream" in parts:
            assert server.process is not None
            results["stream"] = profiled_timing(
                results, "embedded", {"server": server.process.pid}, client, model, sizes.tokens
            )
        if "concurrency" in parts:
            results["concurrency"] = {path: scaling(client, model, store, sizes) for path, store in PATHS.items()}
        if "conversations" in parts:
            results["conversations"] = {
                "chained": talks(client, model, sizes, chained=True),
                "stateless": talks(client, model, sizes, chained=False),
            }
        if "stall" in parts:
            results["stall"] = {"stored": stall(client, model, store=None, sentences=sizes.stall_sentences)}
        if "cancel" in parts:
            results["cancel"] = cancel_latency(client, model)
        if "reads" in parts and "reads" not in results:
            bare = BareApp(directory / "bare.log")
            try:
                sqlite = wrk_reads(server.base_url, bare.base_url)
            finally:
                bare.stop()
            if sqlite is not None:
                results["reads"] = {"sqlite": sqlite}
        if "memory" in parts:
            assert server.process is not None
            memory = results.setdefault("memory", {})
            memory["embedded_rss_mb"] = rss_mb(server.process.pid)
            memory["ours"] = {"kv_mb_per_sequence": ours_kv_mb_per_sequence()}


def bench_distributed(results: dict[str, Any], parts: set[str], directory: Path, sizes: Sizes, gpu: bool) -> None:
    """Time to first token (stored and store: false) and memory with an API node and a worker on Postgres and
    Redis."""
    with ExitStack() as stack:
        try:
            cluster = stack.enter_context(distributed_cluster(directory, THREADS, gpu_env(gpu)))
        except ServicesMissing as error:  # no services here: these figures are left out, the rest still runs
            results["left_out"].append(f"distributed figures (ttft, worker memory): no Postgres or Redis ({error})")
            return
        client = stack.enter_context(sdk_client(cluster.api.base_url))
        model = model_of(client)
        pids = cluster.pids
        if "ttft" in parts:
            results["distributed"] = profiled_timing(results, "distributed", pids, client, model, sizes.tokens)
        if "costs" in parts:
            results["costs"] = {
                path: request_costs(
                    client,
                    model,
                    store,
                    api_pid=pids["api_node"],
                    worker_pid=pids["worker"],
                    redis_url=cluster.redis_url,
                    database_url=cluster.database_url,
                    tokens=sizes.tokens,
                )
                for path, store in PATHS.items()
            }
        if "memory" in parts:
            model_mb = Settings().resolved_model_path.stat().st_size / MB
            memory = results.setdefault("memory", {})
            memory["api_distributed_rss_mb"] = rss_mb(pids["api_node"])
            memory["worker_rss_minus_model_mb"] = rss_mb(pids["worker"]) - model_mb


def bench_llama_server(
    results: dict[str, Any], parts: set[str], binary: Path, directory: Path, sizes: Sizes, gpu: bool
) -> None:
    # On a GPU: as many slots as ours, each with our context (its default is 4 slots sharing one 8,192-cell pool).
    peer = LlamaServer(
        binary,
        THREADS,
        directory / "llama-server.log",
        GPU_SLOTS if gpu else None,
        gpu=gpu,
        n_ctx_per_slot=ours_n_ctx() if gpu else None,
    )
    with peer, sdk_client(peer.base_url) as client:
        model = model_of(client)
        if "stream" in parts:
            results["stream"]["llama_server"] = timing(client, model, sizes.tokens, False)
        if "concurrency" in parts:
            results["concurrency"]["llama_server"] = scaling(client, model, False, sizes)
        if "conversations" in parts:
            results["conversations"]["llama_server_stateless"] = talks(client, model, sizes, chained=False)
        if "stall" in parts:
            results["stall"]["llama_server"] = stall(client, model, store=False, sentences=sizes.stall_sentences)
        if "memory" in parts:
            results.setdefault("memory", {})["llama_server"] = {
                "rss_mb": rss_mb(peer.process.pid),
                "kv_mb_per_sequence": kv_bytes_per_token() * peer.kv_cells_per_sequence() / MB,
                "props": {key: peer.props().get(key) for key in ("total_slots",)},
            }


def bench_reads(results: dict[str, Any], directory: Path) -> bool:
    """bench/reads.py (lane reads) when it is on this branch: both databases, each against the bare endpoint.
    False when it is not, and the embedded server's own SQLite figure stands in."""
    try:
        module = importlib.import_module("bench.reads")
    except ModuleNotFoundError:
        results["left_out"].append("reads on Postgres: bench/reads.py is not on this branch yet (SQLite only)")
        return False
    folder = directory / "reads"
    folder.mkdir()
    results["reads"] = module.bench_reads(folder)
    return True


def bench_events(results: dict[str, Any], directory: Path, sizes: Sizes) -> None:
    """bench/event_writes.py: a background stream's database writes per token (batched, and one event per
    transaction as before), and the event rate one Postgres takes with 1 and 32 writers."""
    try:
        results["events"] = {
            "flush_ms": event_batches.EVENT_FLUSH_MS,
            "flush_events": event_batches.EVENT_FLUSH_EVENTS,
            "event_rate": event_writes.bench_event_rate(EVENT_WRITERS, [EVENT_BATCH], seconds=sizes.event_seconds),
            "stream_writes": event_writes.bench_server(sizes.event_tokens, 3, directory),
        }
    except OSError as error:  # no Postgres to connect to
        results["left_out"].append(f"events (writes per token, Postgres event rate): no Postgres ({error})")


def bench_plugins(results: dict[str, Any], part: str, directory: Path) -> None:
    figures: list[dict[str, Any]] = []
    section: dict[str, Any] = {}
    for module_name, function, lane in PLUGINS[part]:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            path = module_name.replace(".", "/")
            results["left_out"].append(f"{part}: {path}.py is not on this branch yet (lane {lane})")
            continue
        measure: Callable[[Path], dict[str, Any]] = getattr(module, function)
        measured = measure(directory)
        section[module_name.rsplit(".", 1)[-1]] = measured
        figures += measured.get("figures", [])
    if section:
        results[part] = {**section, "figures": figures}


def parse_parts(value: str) -> set[str]:
    parts = {part.strip() for part in value.split(",") if part.strip()}
    unknown = parts - set(PARTS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown part(s) {', '.join(sorted(unknown))}; choose from {PARTS}")
    return parts


def gpu_name() -> str:
    """The card, its memory and driver, as nvidia-smi gives them (a --gpu run's machine line)."""
    query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
    try:
        answer = subprocess.run(query, capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "a GPU that nvidia-smi does not describe"
    cards = [line.split(", ") for line in answer.splitlines() if line.count(", ") == 2]
    return "; ".join(f"{name} ({memory}, driver {driver})" for name, memory, driver in cards)


def machine(gpu: bool = False) -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    described = f"{os.cpu_count()} cores, {cpu}, load average {os.getloadavg()[0]:.1f} at the start"
    return f"{gpu_name()}, {described}" if gpu else described


def run(args: argparse.Namespace) -> dict[str, Any]:
    parts: set[str] = args.only
    gpu: bool = args.gpu
    sizes = QUICK if args.quick else replace(GPU_SIZES if gpu else Sizes(), tokens=args.tokens)
    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(gpu),
        "gpu_offload": gpu,
        "threads": THREADS,
        "sizes": asdict(sizes),
        "parts": sorted(parts),
        "left_out": [],
    }
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        results["profile_dir"] = str(args.profile)
    peer = args.llama_server if args.llama_server.is_file() else None
    if peer is None and parts & PEER_PARTS:
        results["left_out"].append(
            f"llama-server's figures: no binary at {args.llama_server} "
            "(build it with bench/build_llama_server.sh, ~15 min on 2 cores, or pass --llama-server PATH)"
        )
    if "reads" in parts and shutil.which("wrk") is None:
        results["left_out"].append("reads (GET and list throughput): wrk is not installed (apt-get install wrk)")
        parts = parts - {"reads"}
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        if parts & {"stream", "ttft"}:
            raw = raw_stream(THREADS, sizes.tokens, gpu=gpu)
            results["raw"] = {"tokens_per_s": raw.tokens_per_s, "ttft_ms": raw.ttft_s * 1000}
        if "reads" in parts:
            bench_reads(results, directory)
        if parts & EMBEDDED_PARTS:
            bench_embedded(results, parts, directory, sizes, gpu)
        if parts & DISTRIBUTED_PARTS:
            if args.no_distributed:
                results["left_out"].append("distributed figures (ttft, worker memory): --no-distributed")
            else:
                bench_distributed(results, parts, directory, sizes, gpu)
        if peer is not None and parts & PEER_PARTS:
            bench_llama_server(results, parts, peer, directory, sizes, gpu)
        if "events" in parts:
            bench_events(results, directory, sizes)
        for part in parts & set(PLUGINS):
            bench_plugins(results, part, directory)
    return results


def main() -> None:
    # A SIGTERM (timeout, Ctrl-C's cousin) unwinds like an exception, so the servers this run started are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", type=parse_parts, default=set(PARTS), help="comma-separated parts (default: all)")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--json", type=Path, help="also write the JSON here")
    parser.add_argument("--llama-server", type=Path, default=DEFAULT_LLAMA_SERVER)
    parser.add_argument("--no-distributed", action="store_true")
    parser.add_argument("--quick", action="store_true", help="tiny workloads: checks the harness, not the speed")
    parser.add_argument("--gpu", action="store_true", help="offload every layer on all sides; 1, 8 and 32 streams")
    parser.add_argument("--profile", type=Path, help="py-spy our processes while they stream; stacks go here")
    parser.add_argument("--table", type=Path, help="print the table of a saved --json run; measure nothing")
    args = parser.parse_args()
    results = json.loads(args.table.read_text()) if args.table else run(args)
    print(f"bench.run {results['date']}: {results['machine']}, {results['threads']} llama.cpp threads\n")
    print(format_table(figures_from(results)))
    if args.table:
        return
    print()
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
