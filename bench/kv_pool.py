"""The KV pool (issue 26, item 2): many conversations in the KV memory today's 4 sequences reserve, ours against
llama-server given the same memory, both over HTTP on the shipped model with the same threads.

    .venv/bin/python -m bench.kv_pool [--streams 8,16,32] [--tokens 32] [--conversations 16] [--turns 8]
                                      [--rounds 2] [--llama-server PATH]

Today each sequence reserves the model's whole context (4 x 8,192 cells for SmolLM2). Here both sides get one
unified pool of that many cells: ours `RESPONSES_KV_POOL_TOKENS=32768` with RESPONSES_WORKER_CONCURRENCY at the
most streams measured, llama-server `-c 32768 -np <same> --kv-unified`. Both servers run side by side and the
workloads alternate between them, round after round (the machine is shared: each figure is the best round).
Prints:
- the KV memory (MB) and each server's RSS after the run;
- aggregate output tokens/s at each stream count (`store: false` on ours, the path llama-server has);
- turn 8 / turn 1 of --conversations interleaved conversations (ours chained and stateless, llama-server
  stateless: it keeps no responses), the replay goal being <= 1.3. --conversations conversations at once is what
  the pool holds: with today's 4 windows, 12 of 16 conversations' prefixes would come back from the prefix cache
  each turn.
bench.run's `kv` part runs it (PLUGINS) with the defaults above and the default llama-server binary.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from app.config import Settings
from app.testing.servers import ServerProcess
from bench.peers import LlamaServer, embedded, kv_bytes_per_token
from bench.workloads import concurrent_streams, conversations, sdk_client

THREADS = 2
#: Today's KV memory for 4 sequences of SmolLM2's 8,192-token context, as cells of one pool.
TODAY_SEQUENCES = 4
REPLAY_TARGET = 1.3
DEFAULT_LLAMA_SERVER = Path.home() / ".cache/llama-responses/llama-server-11434.0.0/build/bin/llama-server"
MB = 2**20


def pool_tokens() -> int:
    return TODAY_SEQUENCES * (Settings().n_ctx or 8192)


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@contextmanager
def ours(directory: Path, sequences: int) -> Iterator[ServerProcess]:
    with embedded(
        directory, "kv-pool", THREADS, kv_pool_tokens=str(pool_tokens()), worker_concurrency=str(sequences)
    ) as server:
        yield server


def bench(
    directory: Path, binary: Path | None, streams: list[int], tokens: int, talks: int, turns: int, rounds: int
) -> dict[str, Any]:
    sequences = max([*streams, talks])
    results: dict[str, Any] = {
        "pool_tokens": pool_tokens(),
        "kv_mb": kv_bytes_per_token() * pool_tokens() / MB,
        "sequences": sequences,
        "load_average_before": os.getloadavg(),
    }
    sides: dict[str, Any] = {}
    with ours(directory, sequences) as server:
        sides["ours"] = server
        peer = None
        if binary is not None:
            extra = ("-c", str(pool_tokens()), "--kv-unified")
            peer = LlamaServer(binary, THREADS, directory / "kv-pool-llama-server.log", sequences, extra=extra)
            sides["llama_server"] = peer
        try:
            urls = {"ours": server.base_url, **({"llama_server": peer.base_url} if peer else {})}
            clients = {name: sdk_client(url) for name, url in urls.items()}
            models = {name: client.models.list().data[0].id for name, client in clients.items()}
            rates: dict[str, dict[str, float]] = {name: {} for name in clients}
            replay: dict[str, dict[str, Any]] = {}
            for _ in range(rounds):
                for count in streams:
                    for name, client in clients.items():
                        rate = concurrent_streams(client, models[name], count, tokens, False)
                        rates[name][str(count)] = max(rates[name].get(str(count), 0.0), rate)
            for name, client in clients.items():
                lanes = [("stateless", False)] + ([("chained", True)] if name == "ours" else [])
                for lane, chained in lanes:
                    measured = conversations(
                        client, models[name], chained=chained, conversations=talks, turns=turns, tokens=16
                    )
                    replay[f"{name}_{lane}"] = measured
            results["tokens_per_s"] = rates
            results["replay"] = replay
            assert server.process is not None
            results["rss_mb"] = {"ours": rss_mb(server.process.pid)}
            if peer is not None:
                results["rss_mb"]["llama_server"] = rss_mb(peer.process.pid)
        finally:
            if peer is not None:
                peer.stop()
    results["load_average_after"] = os.getloadavg()
    return results


def figures(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows bench.run's table shows (bench/figures.py's plug-in shape: `unstored` is ours with store: false)."""
    pool, kv_mb = results["pool_tokens"], results["kv_mb"]
    rates, replay, rss = results["tokens_per_s"], results["replay"], results["rss_mb"]
    rows: list[dict[str, Any]] = [
        {
            "name": f"conversations at once in today's 4 sequences' KV ({pool:,} cells, {kv_mb:.0f} MB)",
            "unit": "",
            "unstored": results["sequences"],
            "target": {"op": ">=", "value": 16},
            "note": "one unified pool, each sequence growing to the model's context while there is room",
        },
        {
            "name": "RSS with that pool, MB",
            "unit": "MB",
            "unstored": rss["ours"],
            "peer": rss.get("llama_server"),
            "note": "ours holds the API, SQLite and the prefix cache's states beside the model",
        },
    ]
    for count, rate in rates["ours"].items():
        rows.append(
            {
                "name": f"aggregate tokens/s, {count} streams, same KV pool",
                "unit": "tokens/s",
                "unstored": rate,
                "peer": rates.get("llama_server", {}).get(count),
                "target": {"op": ">=", "value": None},
                "note": "decoding is compute-bound on 2 cores: a step of n sequences costs several steps of one",
            }
        )
    stateless, peer = replay["ours_stateless"], replay.get("llama_server_stateless")
    rows.append(
        {
            "name": f"turn {len(stateless['latency_ms_per_turn'])} / turn 1, {results['sequences']} conversations",
            "unit": "x",
            "stored": replay["ours_chained"]["turn8_over_turn1"],
            "unstored": stateless["turn8_over_turn1"],
            "peer": peer["turn8_over_turn1"] if peer else None,
            "target": {"op": "<=", "value": REPLAY_TARGET},
            "note": "each turn reads only its new tokens but attends over a longer context",
        }
    )
    return rows


def measure(directory: Path) -> dict[str, Any]:
    """bench.run's `kv` part: the defaults, llama-server where its binary is built."""
    binary = DEFAULT_LLAMA_SERVER if DEFAULT_LLAMA_SERVER.is_file() else None
    results = bench(directory, binary, [8, 16, 32], 32, 16, 8, 1)
    return {**results, "figures": figures(results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="8,16,32", help="comma-separated")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--llama-server", type=Path, default=DEFAULT_LLAMA_SERVER)
    args = parser.parse_args()
    binary = args.llama_server if args.llama_server.is_file() else None
    streams = [int(count) for count in args.streams.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        results = bench(Path(scratch), binary, streams, args.tokens, args.conversations, args.turns, args.rounds)
    print(f"pool {results['pool_tokens']} cells ({results['kv_mb']:.0f} MB of KV), {results['sequences']} sequences")
    print(f"load average before {results['load_average_before']}, after {results['load_average_after']}")
    print(f"RSS MB: {results['rss_mb']}")
    for name, rates in results["tokens_per_s"].items():
        print(f"{name:>12}: " + ", ".join(f"{count} streams {rate:.1f} tokens/s" for count, rate in rates.items()))
    for lane, measured in results["replay"].items():
        ratio, per_turn = measured["turn8_over_turn1"], measured["latency_ms_per_turn"]
        print(f"{lane:>24}: last turn / turn 1 {ratio:.2f}, ms per turn {per_turn}")
    if binary is None:
        print(f"no llama-server at {args.llama_server}: ours only")


if __name__ == "__main__":
    main()
