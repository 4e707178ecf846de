"""One stream's tokens/s and time to first token on two checkouts of this project: their embedded servers run
side by side and are streamed in turn (A B, then B A, ...), so that the machine's drift falls on both alike. How a
change (a refactor, say) is shown to be no slower than the commit before it.

    .venv/bin/python -m bench.compare_checkouts OTHER_CHECKOUT [--rounds 8] [--tokens 128]

This checkout is the one whose .venv runs the script; OTHER_CHECKOUT needs its own (`make install` there, or a
link to this one's: each server imports `app` from its own checkout, which leads its PYTHONPATH). Prints the median
tokens/s and time to first token of each checkout on the stored path and on `store: false`, this ÷ other, and
this - other for the first token.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from app.testing.databases import sqlite_url
from app.testing.servers import ServerProcess
from bench.workloads import PROMPT, sdk_client, stream_once

MODES: dict[str, bool | None] = {"stored": None, "store_false": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("other", type=Path, help="another checkout of this project, with its own .venv")
    parser.add_argument("--rounds", type=int, default=8, help="streams of each checkout and mode")
    parser.add_argument("--tokens", type=int, default=128, help="output tokens a stream")
    args = parser.parse_args()
    checkouts = {
        "this": (Path(sys.executable).with_name("llama-responses"), Path(__file__).resolve().parents[1]),
        "other": (args.other / ".venv" / "bin" / "llama-responses", args.other.resolve()),
    }
    rates: dict[tuple[str, str], list[float]] = {(name, mode): [] for name in checkouts for mode in MODES}
    firsts: dict[tuple[str, str], list[float]] = {(name, mode): [] for name in checkouts for mode in MODES}
    with ExitStack() as stack, tempfile.TemporaryDirectory() as directory:
        clients = {}
        for name, (cli, source) in checkouts.items():
            folder = Path(directory) / name
            folder.mkdir()
            env = {"RESPONSES_DATABASE_URL": sqlite_url(folder), "PYTHONPATH": str(source)}
            server = ServerProcess(env, folder / "server.log", cli=cli)
            stack.callback(server.stop)
            clients[name] = stack.enter_context(sdk_client(server.start().base_url))
        model = clients["this"].models.list().data[0].id
        for client in clients.values():  # warm-up: the prompt in each server's cache
            for store in MODES.values():
                stream_once(client, model, PROMPT, 16, store)
        for round_ in range(args.rounds):
            for name in list(checkouts)[:: 1 if round_ % 2 == 0 else -1]:
                for mode, store in MODES.items():
                    timing = stream_once(clients[name], model, PROMPT, args.tokens, store)
                    rates[(name, mode)].append(timing.tokens_per_s)
                    firsts[(name, mode)].append(timing.ttft_s * 1000)
    medians = {f"{name} {mode}": round(statistics.median(values), 1) for (name, mode), values in rates.items()}
    ratios = {f"this ÷ other, {mode}": round(medians[f"this {mode}"] / medians[f"other {mode}"], 3) for mode in MODES}
    first = {f"{name} {mode}": round(statistics.median(values), 1) for (name, mode), values in firsts.items()}
    gaps = {f"this - other, {mode}": round(first[f"this {mode}"] - first[f"other {mode}"], 1) for mode in MODES}
    print(
        json.dumps({"tokens_per_s": medians, **ratios, "first_token_ms": first, **gaps}, indent=2, ensure_ascii=False)
    )


if __name__ == "__main__":
    main()
