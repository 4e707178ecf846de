"""MCP memory figures (not a test): how much a process's peak memory (RSS) grows while an MCP server answers a tool
call with a 100 MB output, and a listing with a 30 MB tool description, against a small call's growth.

    .venv/bin/python -m bench.mcp_memory [--output-mb 100] [--description-mb 30]

Each case runs in a fresh client process (its peak RSS, VmHWM, read before and after the one exchange) against a
server in a process of its own (app/testing/mcp_server.py's `flood`), with the default caps (64 KiB of output,
4 MiB of listing). Before this change the answers were read whole before any cap: 434 MB and 130 MB of growth.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path

from app.mcp.client import DEFAULT_LIST_BOUNDS, McpFailed, call_tool, list_tools
from app.outbound.addresses import AllowedHosts
from app.testing.mcp_server import tool_server

LOOPBACK = "127.0.0.1:*"
OUTPUT_CAP = 65536


def peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


async def serve(method: str, size: int) -> None:
    """A server that answers `method` with a flood of `size` bytes, until stdin closes; its URL on stdout."""
    async with tool_server() as server:
        if size:
            server.flood = (method, size)
        print(server.url, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


async def client(case: str, url: str) -> dict[str, object]:
    allowed = AllowedHosts.parse(LOOPBACK)
    # First exchanges with a server of its own that floods nothing: the imports', the SDK's and the TLS context's
    # memory counted out of the figure.
    async with tool_server() as warm:
        await list_tools(warm.url, {}, allowed=allowed, timeout_s=60)
        await call_tool(warm.url, {}, "add", {"a": 1, "b": 2}, allowed=allowed, timeout_s=60, max_output_bytes=99)
    before = peak_rss_mb()
    outcome = "ok"
    try:
        if case == "description":
            await list_tools(url, {}, allowed=allowed, timeout_s=120, bounds=DEFAULT_LIST_BOUNDS)
        else:
            await call_tool(url, {}, "unlisted", {}, allowed=allowed, timeout_s=120, max_output_bytes=OUTPUT_CAP)
    except McpFailed as failed:
        outcome = str(failed)
    return {"case": case, "growth_mb": peak_rss_mb() - before, "outcome": outcome}


def run_case(case: str, method: str, size: int) -> dict[str, object]:
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.mcp_memory", "--serve", method, str(size)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        measured = subprocess.run(
            [sys.executable, "-m", "bench.mcp_memory", "--client", case, url],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        result: dict[str, object] = json.loads(measured.stdout.strip().splitlines()[-1])
        return result
    finally:
        server.terminate()
        server.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-mb", type=float, default=100)
    parser.add_argument("--description-mb", type=float, default=30)
    parser.add_argument("--serve", nargs=2, metavar=("METHOD", "BYTES"), help=argparse.SUPPRESS)
    parser.add_argument("--client", nargs=2, metavar=("CASE", "URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve[0], int(args.serve[1])))
        return
    if args.client:
        print(json.dumps(asyncio.run(client(*args.client))))
        return
    small = run_case("small output", "tools/call", 100)
    output = run_case("output", "tools/call", int(args.output_mb * 1e6))
    description = run_case("description", "tools/list", int(args.description_mb * 1e6))
    for name, size_mb, result in (
        ("a 100-byte output (baseline)", 1e-4, small),
        (f"a {args.output_mb:g} MB output", args.output_mb, output),
        (f"a {args.description_mb:g} MB description", args.description_mb, description),
    ):
        growth = float(result["growth_mb"])  # type: ignore[arg-type]
        print(
            f"{name:30s} peak RSS +{growth:6.1f} MB  ({growth / size_mb:6.2f} x the answer's size)  {result['outcome']}"
        )


if __name__ == "__main__":
    main()
