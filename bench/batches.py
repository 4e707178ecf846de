"""A batch of many tiny requests on the embedded server (issue 23, "Done when"): the server's peak RSS, the lines a
second, and how much the running batch delays a foreground request, against the same request alone (same run).

    .venv/bin/python -m bench.batches [--engine fake|real] [--lines 10000] [--tokens 16] [--token-ms 8.7]
                                      [--foreground 5] [--max-running N] [--per-round N] [--interval-s S]

Starts this checkout's embedded server on a fresh SQLite database in a subprocess: `--engine real` is
`python -m app.cli serve` with the shipped SmolLM2 model (2 threads, 4 sequences); `--engine fake` is the same app
with the unit tests' fake model instead of llama.cpp (`serve` below: a 9-word answer, a word every --token-ms,
4 sequences), which measures everything around the model (10,000 lines of the real model take hours on a CPU). Then:

1. the foreground request (a non-streamed create, "Say hi.", --tokens at most) is timed alone, --foreground times;
2. a JSONL file of --lines requests ("Say <n>.", --tokens at most, temperature 0) is uploaded and a batch
   created; while it runs, the server's RSS (/proc/<pid>/status VmRSS) is sampled every 0.25 s, and the same
   foreground request is timed again, --foreground times, spread over the batch's first half;
3. once the batch is completed: lines/s (total over the time from `in_progress_at` to `completed_at`, and over
   the client's wall time from create), the server's CPU time a line (/proc/<pid>/stat), RSS before the batch,
   at each quarter of its lines and at its peak (VmHWM), foreground medians and their ratio loaded / alone.

--max-running / --per-round / --interval-s set RESPONSES_BATCH_MAX_RUNNING_LINES / _LINES_PER_ROUND /
_INTERVAL_S (the batch runner's pace; unset: the defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import httpx

from app.testing.servers import ServerProcess

PROMPT = "Say hi."
TERMINAL = ("completed", "failed", "expired", "cancelled")


# --- the server side: the app on the fake model, for `--engine fake` -------------------------------------------


def serve(argv: list[str]) -> None:
    """`serve --port P [--log-level L]`: the app with the fake model (as the unit tests have it) under uvicorn."""
    import uvicorn

    from app.config import Settings
    from app.generation.job import GenerationJob
    from app.main import create_app
    from app.testing.fakes import FakeRenderer, FakeRun, FakeRunner, fake_generation

    class BenchRunner(FakeRunner):
        """The fake runner, keeping no job once it ended (the tests' one keeps every job for their asserts)."""

        def __init__(self, delay_s: float) -> None:
            super().__init__(delay_s)
            self.live: weakref.WeakValueDictionary[str, FakeRun] = weakref.WeakValueDictionary()

        def start(self, job: GenerationJob) -> FakeRun:
            run = FakeRun(job, self.reply, self.delay_s, None, self.separator, None)
            self.live[job.response_id] = run
            return run

        def cancel(self, response_id: str) -> None:
            run = self.live.get(response_id)
            if run is not None:
                run.cancel()

    parser = argparse.ArgumentParser(prog="bench.batches serve")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    token_ms = float(os.environ.get("BENCH_FAKE_TOKEN_MS", "8.7"))
    places = int(os.environ.get("BENCH_FAKE_PLACES", "4"))
    settings = Settings(model_id="fake-model")
    app = create_app(settings, fake_generation(FakeRenderer(n_ctx=512), BenchRunner(token_ms / 1000), places=places))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level=args.log_level)


# --- the client side --------------------------------------------------------------------------------------------


class RssSampler:
    """The server's resident memory (kB), sampled in a thread: every sample, and the latest."""

    def __init__(self, pid: int, every_s: float = 0.25) -> None:
        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(every_s,), daemon=True)
        self._thread.start()

    def _run(self, every_s: float) -> None:
        while not self._stop.is_set():
            value = status_kb(self.pid, "VmRSS")
            if value is not None:
                self.samples.append((time.monotonic(), value))
            self._stop.wait(every_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def latest_kb(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    @property
    def peak_kb(self) -> int:
        return max((value for _, value in self.samples), default=0)


def status_kb(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_s(pid: int) -> float:
    """The CPU time (user + system) the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def foreground(http: httpx.Client, tokens: int) -> float:
    """Seconds a non-streamed create of PROMPT takes, end to end."""
    started = time.perf_counter()
    reply = http.post("/v1/responses", json={"input": PROMPT, "max_output_tokens": tokens, "temperature": 0})
    reply.raise_for_status()
    assert reply.json()["status"] in ("completed", "incomplete"), reply.text
    return time.perf_counter() - started


def batch_file(lines: int, tokens: int) -> bytes:
    requests = (
        {
            "custom_id": f"line-{index}",
            "method": "POST",
            "url": "/v1/responses",
            "body": {"input": f"Say {index}.", "max_output_tokens": tokens, "temperature": 0},
        }
        for index in range(lines)
    )
    return b"".join(json.dumps(request).encode() + b"\n" for request in requests)


def run_batch(
    http: httpx.Client, sampler: RssSampler, lines: int, tokens: int, samples: int
) -> tuple[dict[str, Any], list[float], dict[str, int]]:
    """(the batch at its end, the foreground latencies beside it, RSS kB at each quarter of the lines done)."""
    uploaded = http.post(
        "/v1/files", files={"file": ("tiny.jsonl", batch_file(lines, tokens))}, data={"purpose": "batch"}
    )
    uploaded.raise_for_status()
    created = http.post(
        "/v1/batches",
        json={"input_file_id": uploaded.json()["id"], "endpoint": "/v1/responses", "completion_window": "24h"},
    )
    created.raise_for_status()
    batch: dict[str, Any] = created.json()
    loaded: list[float] = []
    quarters: dict[str, int] = {}
    last_foreground = 0.0
    while batch["status"] not in TERMINAL:
        time.sleep(0.5)
        batch = http.get(f"/v1/batches/{batch['id']}").json()
        counts = batch["request_counts"]
        done = counts["completed"] + counts["failed"]
        for quarter in (1, 2, 3, 4):
            if done >= lines * quarter / 4 and f"{quarter}/4" not in quarters:
                quarters[f"{quarter}/4"] = sampler.latest_kb
        # The foreground samples are spread over the batch's first half, while it surely runs.
        running = batch["status"] == "in_progress" and 0 < done < lines / 2
        if running and len(loaded) < samples and time.monotonic() - last_foreground > 2.0:
            loaded.append(foreground(http, tokens))
            last_foreground = time.monotonic()
    return batch, loaded, quarters


def measure(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    env = {"RESPONSES_DATABASE_URL": f"sqlite+aiosqlite:///{directory / 'batches.db'}"}
    for name, value in (
        ("RESPONSES_BATCH_MAX_RUNNING_LINES", args.max_running),
        ("RESPONSES_BATCH_LINES_PER_ROUND", args.per_round),
        ("RESPONSES_BATCH_INTERVAL_S", args.interval_s),
    ):
        if value is not None:
            env[name] = str(value)
    if args.engine == "fake":
        env["BENCH_FAKE_TOKEN_MS"] = str(args.token_ms)
        module = "bench.batches"
    else:
        module = "app.cli"
    # This checkout's code, whatever `llama-responses` is installed.
    server = ServerProcess(env, directory / "server.log", cli=Path(module), wrapper=[sys.executable, "-m"])
    server.start()
    assert server.process is not None
    sampler = RssSampler(server.process.pid)
    try:
        with httpx.Client(base_url=server.base_url, timeout=600) as http:
            foreground(http, args.tokens)  # warm-up: the model loads on first use
            alone = [foreground(http, args.tokens) for _ in range(args.foreground)]
            before_kb = sampler.latest_kb
            started, cpu_before = time.monotonic(), cpu_s(server.process.pid)
            batch, loaded, quarters = run_batch(http, sampler, args.lines, args.tokens, args.foreground)
            wall_s, batch_cpu_s = time.monotonic() - started, cpu_s(server.process.pid) - cpu_before
            peak_hwm_kb = status_kb(server.process.pid, "VmHWM")
    finally:
        sampler.stop()
        server.stop()
    counts = batch["request_counts"]
    ran_s = (batch["completed_at"] or 0) - (batch["in_progress_at"] or 0)
    alone_s, loaded_s = statistics.median(alone), statistics.median(loaded) if loaded else float("nan")
    return {
        "engine": args.engine,
        "lines": args.lines,
        "tokens": args.tokens,
        "token_ms": args.token_ms if args.engine == "fake" else None,
        "runner": {"max_running": args.max_running, "per_round": args.per_round, "interval_s": args.interval_s},
        "status": batch["status"],
        "completed": counts["completed"],
        "failed": counts["failed"],
        "output_tokens": batch["usage"]["output_tokens"],
        "in_progress_to_completed_s": ran_s,
        "lines_per_s": counts["total"] / ran_s if ran_s > 0 else None,
        "wall_s": wall_s,
        "lines_per_s_wall": counts["total"] / wall_s,
        # The server's CPU time over the batch (the foreground requests beside it included), a line.
        "server_cpu_ms_per_line": batch_cpu_s * 1000 / counts["total"],
        "rss_before_mb": before_kb / 1024,
        "rss_at_quarters_mb": {key: value / 1024 for key, value in quarters.items()},
        "rss_peak_sampled_mb": sampler.peak_kb / 1024,
        "rss_peak_hwm_mb": (peak_hwm_kb or 0) / 1024,
        "foreground_alone_s": alone_s,
        "foreground_beside_batch_s": loaded_s,
        "foreground_ratio": loaded_s / alone_s,
        "foreground_samples": {"alone": alone, "beside_batch": loaded},
    }


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--engine", choices=("fake", "real"), default="fake")
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--token-ms", type=float, default=8.7, help="the fake model's time a token")
    parser.add_argument("--foreground", type=int, default=5, help="foreground requests timed alone and beside")
    parser.add_argument("--max-running", type=int)
    parser.add_argument("--per-round", type=int)
    parser.add_argument("--interval-s", type=float)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-batches-") as directory:
        result = measure(args, Path(directory))
    print(
        f"{args.engine} engine, {args.lines} lines of {args.tokens} tokens at most: {result['status']} "
        f"({result['completed']} completed, {result['failed']} failed) in {result['in_progress_to_completed_s']} s, "
        f"{result['lines_per_s'] or 0:.1f} lines/s ({result['lines_per_s_wall']:.1f} over the wall time), "
        f"{result['server_cpu_ms_per_line']:.0f} ms of server CPU a line; "
        f"server RSS {result['rss_before_mb']:.0f} MB before, peak {result['rss_peak_hwm_mb']:.0f} MB, at each "
        f"quarter {', '.join(f'{value:.0f}' for value in result['rss_at_quarters_mb'].values())} MB; foreground "
        f"create {result['foreground_alone_s']:.3f} s alone, {result['foreground_beside_batch_s']:.3f} s beside the "
        f"batch (ratio {result['foreground_ratio']:.2f})"
    )
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
