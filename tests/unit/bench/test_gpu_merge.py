"""bench/gpu/merge.py: the parts that bench/gpu/run.sh runs one at a time, as one run's JSON."""

from __future__ import annotations

from bench.figures import figures_from
from bench.gpu.merge import merge


def test_parts_run_apart_read_as_one_run() -> None:
    stream = {
        "date": "2026-11-26T16:00:00+00:00",
        "machine": "NVIDIA H200",
        "parts": ["stream"],
        "left_out": ["distributed figures (ttft, worker memory): --no-distributed"],
        "raw": {"tokens_per_s": 900.0, "ttft_ms": 3.0},
        "stream": {"stored": {"tokens_per_s": 500.0, "ttft_ms": 20.0}},
    }
    memory = {
        "date": "2026-11-26T16:05:00+00:00",
        "machine": "NVIDIA H200",
        "parts": ["memory"],
        "left_out": ["distributed figures (ttft, worker memory): --no-distributed"],
        "memory": {"embedded_rss_mb": 900.0},
    }
    peer_memory = {"parts": ["memory"], "left_out": [], "memory": {"llama_server": {"rss_mb": 400.0}}}
    merged = merge([stream, memory, peer_memory])
    assert merged["date"] == stream["date"]  # the run began with its first part
    assert merged["parts"] == ["memory", "stream"]
    assert merged["left_out"] == ["distributed figures (ttft, worker memory): --no-distributed"]
    assert merged["memory"] == {"embedded_rss_mb": 900.0, "llama_server": {"rss_mb": 400.0}}
    figures = {figure.name: figure for figure in figures_from(merged).figures}
    assert figures["1 stream, streamed tokens/s"].stored == 500.0
    assert figures["RSS, embedded server (model + KV)"].peer == 400.0
