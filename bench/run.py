"""Benchmarks (issue 6): every figure a ratio against a baseline measured in the same run.

    .venv/bin/python -m bench.run [--tokens 128] [--json results.json] [--llama-server PATH] [--no-distributed]

On the shipped model with the same thread count on every side:
  1. streamed tokens/s through the API (openai SDK) / raw llama_cpp.Llama in-process, and / llama-server
  2. time to first token through the API - raw, embedded and distributed
  3. 8 interleaved conversations x 8 turns, chained and stateless (and stateless against llama-server):
     latency of turn 8 / turn 1, and prompt tokens prefilled per turn (input - cached)
  4. cancel latency: POST /cancel on a generating background response until it returns the stopped one
  5. GET /v1/responses/{id} requests/s / a bare FastAPI endpoint under the same uvicorn settings (wrk)
  6. aggregate tokens/s with 1, 2, 4, 8 concurrent streams, ours and llama-server's (default slots)
  7. API node RSS; worker RSS minus the model file
llama-server figures need its binary (bench/build_llama_server.sh); distributed ones need Postgres and Redis
(RESPONSES_TEST_POSTGRES_URL, RESPONSES_BENCH_REDIS_URL; the local services by default).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import openai
import redis

from app.config import Settings
from bench.peers import BareApp, LlamaServer, raw_stream, wrk
from bench.workloads import best_stream, cancel_latency, concurrent_streams, conversations, sdk_client
from tests.fixtures.databases import fresh_postgres_database
from tests.fixtures.server import ServerProcess, run_cli, wait_until_ready

THREADS = 2
STREAM_COUNTS = (1, 2, 4, 8)
CONCURRENT_TOKENS = 64
DEFAULT_LLAMA_SERVER = Path.home() / ".cache/llama-responses/llama-server-11434.0.0/build/bin/llama-server"
DEFAULT_BENCH_REDIS_URL = "redis://127.0.0.1:6379/10"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def model_of(client: openai.OpenAI) -> str:
    return client.models.list().data[0].id


def scaling(client: openai.OpenAI, model: str) -> dict[str, float]:
    rates = {str(count): concurrent_streams(client, model, count, CONCURRENT_TOKENS) for count in STREAM_COUNTS}
    return {**{f"{count}_streams": rate for count, rate in rates.items()}, "8_over_1": rates["8"] / rates["1"]}


@contextmanager
def embedded_server(directory: Path) -> Iterator[ServerProcess]:
    env = {"RESPONSES_DATABASE_URL": f"sqlite+aiosqlite:///{directory}/bench.db", "RESPONSES_N_THREADS": str(THREADS)}
    server = ServerProcess(env, directory / "server.log").start()
    try:
        yield server
    finally:
        server.stop()


def bench_embedded(results: dict[str, Any], directory: Path, tokens: int, raw_tokens_per_s: float) -> float:
    """Figures 1-7 against our embedded server; returns its time to first token."""
    with embedded_server(directory) as server:
        client = sdk_client(server.base_url)
        model = model_of(client)
        api = best_stream(client, model, tokens)
        results["1_stream_tokens_per_s"] = {
            "api": api.tokens_per_s,
            "raw": raw_tokens_per_s,
            "api_over_raw": api.tokens_per_s / raw_tokens_per_s,
        }
        results["3_conversations"] = {
            "chained": conversations(client, model, chained=True),
            "stateless": conversations(client, model, chained=False),
        }
        results["4_cancel_latency_ms"] = cancel_latency(client, model)
        stored = client.responses.create(model=model, input="Hi!", max_output_tokens=16)
        bare = BareApp(directory / "bare.log")
        try:
            ours = wrk(f"{server.base_url}/v1/responses/{stored.id}")
            baseline = wrk(f"{bare.base_url}/bare")
        finally:
            bare.stop()
        if ours is not None and baseline is not None:
            ratio = ours["requests_per_s"] / baseline["requests_per_s"]
            results["5_get_requests_per_s"] = {"api": ours, "bare_fastapi": baseline, "api_over_bare": ratio}
        results["6_concurrent_tokens_per_s"] = {"api": scaling(client, model)}
        assert server.process is not None
        results["7_memory_mb"] = {"api_embedded_rss": rss_mb(server.process.pid)}
        client.close()
        return api.ttft_s


def bench_distributed(results: dict[str, Any], directory: Path, tokens: int) -> float | None:
    """Time to first token and memory with an API node and a worker on Postgres and Redis."""
    redis_url = os.environ.get("RESPONSES_BENCH_REDIS_URL", DEFAULT_BENCH_REDIS_URL)
    with ExitStack() as stack:
        try:
            with redis.Redis.from_url(redis_url) as connection:
                connection.flushdb()
            database_url = stack.enter_context(fresh_postgres_database())
        except Exception as error:  # no services here: these figures are left out, the rest still runs
            results["distributed_skipped"] = str(error)
            return None
        env = {"RESPONSES_DATABASE_URL": database_url, "RESPONSES_REDIS_URL": redis_url, "RESPONSES_N_THREADS": "2"}
        assert run_cli(["migrate"], env).returncode == 0
        worker = ServerProcess(env, directory / "worker.log", command=["worker"]).start()
        stack.callback(worker.stop)
        api = ServerProcess(env, directory / "api.log").start()
        stack.callback(api.stop)
        wait_until_ready(api.base_url)
        client = stack.enter_context(sdk_client(api.base_url))
        timing = best_stream(client, model_of(client), tokens)
        assert worker.process is not None and api.process is not None
        model_mb = Settings().resolved_model_path.stat().st_size / 2**20
        results.setdefault("7_memory_mb", {}).update(
            {
                "api_distributed_rss": rss_mb(api.process.pid),
                "worker_rss_minus_model_file": rss_mb(worker.process.pid) - model_mb,
            }
        )
        return timing.ttft_s


def bench_llama_server(results: dict[str, Any], binary: Path, directory: Path, tokens: int) -> None:
    with LlamaServer(binary, THREADS, directory / "llama-server.log") as peer:
        client = sdk_client(peer.base_url)
        model = model_of(client)
        timing = best_stream(client, model, tokens)
        results["1_stream_tokens_per_s"]["llama_server"] = timing.tokens_per_s
        results["1_stream_tokens_per_s"]["api_over_llama_server"] = (
            results["1_stream_tokens_per_s"]["api"] / timing.tokens_per_s
        )
        results["3_conversations"]["llama_server_stateless"] = conversations(client, model, chained=False)
        results["6_concurrent_tokens_per_s"]["llama_server"] = scaling(client, model)
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--llama-server", type=Path, default=DEFAULT_LLAMA_SERVER)
    parser.add_argument("--no-distributed", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {"machine": f"{os.cpu_count()} cores", "threads": THREADS, "tokens": args.tokens}

    raw = raw_stream(THREADS, args.tokens)
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        embedded_ttft = bench_embedded(results, directory, args.tokens, raw.tokens_per_s)
        results["2_ttft_ms"] = {
            "raw": raw.ttft_s * 1000,
            "embedded": embedded_ttft * 1000,
            "embedded_minus_raw": (embedded_ttft - raw.ttft_s) * 1000,
        }
        if not args.no_distributed and (distributed_ttft := bench_distributed(results, directory, args.tokens)):
            results["2_ttft_ms"]["distributed"] = distributed_ttft * 1000
            results["2_ttft_ms"]["distributed_minus_raw"] = (distributed_ttft - raw.ttft_s) * 1000
        if args.llama_server.is_file():
            bench_llama_server(results, args.llama_server, directory, args.tokens)
        else:
            results["llama_server_skipped"] = f"no binary at {args.llama_server} (bench/build_llama_server.sh)"

    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
