"""The baselines each figure is divided by: raw llama-cpp-python in-process, llama.cpp's llama-server, and a
bare FastAPI endpoint under the same uvicorn settings as our server; and our own distributed cluster."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import llama_cpp
import redis

from app.config import Settings
from app.generation.kv.window import geometry_of
from app.generation.prompt import ChatMessage
from app.generation.tokenizer import ChatTokenizer
from app.testing.databases import fresh_postgres_database
from app.testing.servers import ServerProcess, free_port, run_cli, wait_for_ok, wait_until_ready
from bench.workloads import PROMPT, StreamTiming

DEFAULT_BENCH_REDIS_URL = "redis://127.0.0.1:6379/10"


def raw_stream(threads: int, tokens: int, *, gpu: bool = False) -> StreamTiming:
    """llama-cpp-python's high-level API on its own: the same prompt, rendered the same way, greedy. With `gpu`,
    every layer offloaded and flash attention on, as our engine and llama-server have them on a GPU."""
    path = Settings().resolved_model_path
    prompt = ChatTokenizer(path, n_ctx=None).render([ChatMessage("user", PROMPT)])
    llm = llama_cpp.Llama(
        model_path=str(path),
        n_ctx=0,
        n_threads=threads,
        verbose=False,
        n_gpu_layers=-1 if gpu else 0,  # 0 and False: the high-level API's defaults
        flash_attn=gpu,
    )
    # Warm-up, as on the API side: the prompt is then in the KV cache on both sides.
    for _ in llm.create_completion(prompt, max_tokens=16, temperature=0, stream=True):
        pass
    started = time.perf_counter()
    first = last = 0.0
    produced = 0
    for _ in llm.create_completion(prompt, max_tokens=tokens, temperature=0, stream=True):
        last = time.perf_counter()
        first = first or last
        produced += 1
    llm.close()
    return StreamTiming(ttft_s=first - started, deltas=produced, tokens_per_s=(produced - 1) / (last - first))


def kv_bytes_per_token(model: Path | None = None) -> int:
    """KV cache bytes one token takes on the shipped model (or `model`): K and V, f16 (llama.cpp's default), every
    layer, of the real head sizes (key_length, value_length: Gemma 3's are not embedding / heads); from the GGUF
    header (the vocabulary-only load reads no weights)."""
    llm = llama_cpp.Llama(model_path=str(model or Settings().resolved_model_path), vocab_only=True, verbose=False)
    try:
        return geometry_of(llm.metadata, 0).bytes_per_token
    finally:
        llm.close()


class LlamaServer:
    """llama.cpp's own server on the same model file and threads (bench/build_llama_server.sh builds it). With
    `gpu`, every layer offloaded; with `n_ctx_per_slot`, `parallel` slots of that many KV cells each (split, as
    ours) rather than its default of one pool they share; `extra`: more arguments (`--kv-unified`); `model`: another
    GGUF than the shipped one."""

    def __init__(
        self,
        binary: Path,
        threads: int,
        log: Path,
        parallel: int | None = None,
        *,
        gpu: bool = False,
        n_ctx_per_slot: int | None = None,
        extra: tuple[str, ...] = (),
        model: Path | None = None,
    ) -> None:
        self.port = free_port()
        command = [str(binary), "-m", str(model or Settings().resolved_model_path), "--port", str(self.port)]
        command += ["-t", str(threads), "-tb", str(threads), "--log-disable"]
        if parallel is not None:
            command += ["-np", str(parallel)]
            if n_ctx_per_slot is not None:
                command += ["-c", str(parallel * n_ctx_per_slot)]
        if gpu:
            command += ["-ngl", "999"]
        command += extra
        with log.open("ab") as output:
            self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        self.base_url = f"http://127.0.0.1:{self.port}"
        if not wait_for_ok(f"{self.base_url}/health", timeout_s=120):
            self.stop()
            raise RuntimeError(f"llama-server did not start:\n{log.read_text()[-2000:]}")

    def props(self) -> dict[str, Any]:
        """Its own account of its context and slots (GET /props)."""
        answer: dict[str, Any] = httpx.get(f"{self.base_url}/props", timeout=10).json()
        return answer

    def kv_cells_per_sequence(self) -> float:
        """Its KV pool is unified: n_ctx cells shared by all slots (one slot may use all of them)."""
        props = self.props()
        return float(props["default_generation_settings"]["n_ctx"]) / int(props["total_slots"])

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


class BareApp:
    """bench/bare_app.py under uvicorn, started as `llama-responses serve` starts ours (uvicorn.run defaults)."""

    def __init__(self, log: Path) -> None:
        self.port = free_port()
        command = [sys.executable, "-m", "bench.bare_app", "--port", str(self.port)]
        with log.open("ab") as output:
            self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        self.base_url = f"http://127.0.0.1:{self.port}"
        if not wait_for_ok(f"{self.base_url}/bare", timeout_s=30):
            self.stop()
            raise RuntimeError("the bare app did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def wrk(url: str, seconds: int = 5, connections: int = 16) -> dict[str, Any] | None:
    """Requests/s and p99 latency from wrk (one thread, from loopback); None when wrk is not installed."""
    if shutil.which("wrk") is None:
        return None
    output = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", output)
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    if rate is None or p99 is None:
        raise RuntimeError(f"unexpected wrk output:\n{output}")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
    return {
        "requests_per_s": float(rate.group(1)),
        "p99_ms": float(p99.group(1)) * scale,
        "errors": int(non_2xx.group(1)) if non_2xx else 0,
    }


class ServicesMissing(RuntimeError):
    """Postgres or Redis could not be reached: the distributed figures are left out, the rest still runs."""


@contextmanager
def embedded(directory: Path, name: str, threads: int, **settings: str) -> Iterator[ServerProcess]:
    """Our embedded server on a SQLite file of its own (`name`.db, its log `name`-server.log), with `threads`
    llama.cpp threads and the RESPONSES_* `settings` (given without the prefix), stopped when the block ends."""
    env = {
        "RESPONSES_DATABASE_URL": f"sqlite+aiosqlite:///{directory}/{name}.db",
        "RESPONSES_N_THREADS": str(threads),
        **{f"RESPONSES_{key.upper()}": value for key, value in settings.items()},
    }
    server = ServerProcess(env, directory / f"{name}-server.log").start()
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class Cluster:
    api: ServerProcess
    worker: ServerProcess
    database_url: str
    redis_url: str

    @property
    def pids(self) -> dict[str, int]:
        assert self.api.process is not None and self.worker.process is not None
        return {"api_node": self.api.process.pid, "worker": self.worker.process.pid}


@contextmanager
def distributed_cluster(directory: Path, threads: int, gpu_env: dict[str, str] | None = None) -> Iterator[Cluster]:
    """An API node and a worker on a fresh Postgres database and the bench's Redis database (flushed first):
    RESPONSES_TEST_POSTGRES_URL and RESPONSES_BENCH_REDIS_URL, the local services by default. `gpu_env`: the
    worker's offload settings."""
    redis_url = os.environ.get("RESPONSES_BENCH_REDIS_URL", DEFAULT_BENCH_REDIS_URL)
    with ExitStack() as stack:
        try:
            with redis.Redis.from_url(redis_url) as connection:
                connection.flushdb()
            database_url = stack.enter_context(fresh_postgres_database())
        except Exception as error:
            raise ServicesMissing(str(error)) from error
        env = {"RESPONSES_DATABASE_URL": database_url, "RESPONSES_REDIS_URL": redis_url}
        env["RESPONSES_N_THREADS"] = str(threads)
        env.update(gpu_env or {})
        assert run_cli(["migrate"], env).returncode == 0
        worker = ServerProcess(env, directory / "worker.log", command=["worker"]).start()
        stack.callback(worker.stop)
        api = ServerProcess(env, directory / "api.log").start()
        stack.callback(api.stop)
        wait_until_ready(api.base_url)
        yield Cluster(api, worker, database_url, redis_url)
