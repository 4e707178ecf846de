"""Prompt work under hostile input (issue 9): `truncation: "auto"` over 100 messages of 10 KB, and what six such
requests at once do to an ordinary create.

    .venv/bin/python -m bench.prompt_work [--messages 100] [--kb 10] [--heavy 6]

1. CPU seconds to render and truncate the 100 x 10 KB conversation with the shipped model's tokenizer: the
   server's way (ChatTokenizer.render_within_context) / rendering again for every dropped message (the way before
   issue 9, measured here as the baseline in the same run).
2. Seconds an ordinary create (a short question, 16 tokens) takes on an embedded server alone, and while six
   heavy requests (the conversation above, truncation auto) run at once; the server's context is 1,024 tokens,
   so that what is measured is the prompt work rather than prefilling six long prompts.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from app.generation.prompt import ChatMessage
from app.generation.tokenizer import ChatTokenizer
from app.generation.types import ContextTooLong
from app.testing.servers import ServerProcess

WORDS = "the of and river owl glass comet bread map bee tea lantern quiet orbit harbor meadow signal".split()  # noqa: SIM905


def conversation(messages: int, kilobytes: int) -> list[dict[str, str]]:
    rng = random.Random(9)
    items = []
    for index in range(messages):
        text = " ".join(rng.choice(WORDS) for _ in range(kilobytes * 1024 // 5))[: kilobytes * 1024]
        items.append({"role": "user" if index % 2 == 0 else "assistant", "content": text})
    items.append({"role": "user", "content": "Say hi."})
    return items


def render_again_per_message(tokenizer: ChatTokenizer, conversation: Sequence[ChatMessage]) -> list[int]:
    """The baseline: render the whole rest again after dropping each oldest message."""
    tokens = tokenizer.render(conversation)
    for start in range(1, len(conversation)):
        if tokenizer.fits(len(tokens)):
            return tokens
        tokens = tokenizer.render(conversation[start:])
    if tokenizer.fits(len(tokens)):
        return tokens
    raise ContextTooLong(len(tokens), tokenizer.n_ctx)


def cpu_s(function: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    started = time.process_time()
    result = function(*args, **kwargs)
    return time.process_time() - started, result


def truncation_cpu(items: list[dict[str, str]]) -> None:
    tokenizer = ChatTokenizer(Settings(_env_file=None).resolved_model_path, n_ctx=None)
    messages = [ChatMessage(item["role"], item["content"]) for item in items]
    ours_s, ours = cpu_s(tokenizer.render_within_context, None, messages, truncate=True)
    baseline_s, baseline = cpu_s(render_again_per_message, tokenizer, messages)
    print(f"1. render + truncate {len(items) - 1} x {len(items[0]['content']) // 1024} KB (n_ctx {tokenizer.n_ctx}):")
    print(f"   server:   {ours_s:7.2f} s CPU -> {len(ours)} tokens")
    print(f"   baseline: {baseline_s:7.2f} s CPU -> {len(baseline)} tokens (render again per dropped message)")
    print(f"   baseline / server: {baseline_s / ours_s:.1f}x")


def ordinary_create_s(client: httpx.Client) -> float:
    started = time.perf_counter()
    reply = client.post("/v1/responses", json={"input": "Say hi.", "max_output_tokens": 16, "store": False})
    reply.raise_for_status()
    return time.perf_counter() - started


def stall(items: list[dict[str, str]], heavy: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        # A small context: what is measured is the prompt work, not prefilling 8K tokens six times over.
        env = {"RESPONSES_DATABASE_URL": f"sqlite+aiosqlite:///{directory}/bench.db", "RESPONSES_N_CTX": "1024"}
        server = ServerProcess(env, Path(directory) / "server.log").start()
        try:
            with httpx.Client(base_url=server.base_url, timeout=600) as client:
                ordinary_create_s(client)  # warm
                alone = statistics.median(ordinary_create_s(client) for _ in range(3))
                body = {"input": items, "truncation": "auto", "max_output_tokens": 16, "store": False}
                heavy_s: list[float] = []

                def one() -> None:
                    started = time.perf_counter()
                    client.post("/v1/responses", json=body).raise_for_status()
                    heavy_s.append(time.perf_counter() - started)

                threads = [threading.Thread(target=one) for _ in range(heavy)]
                for thread in threads:
                    thread.start()
                time.sleep(0.5)  # the heavy ones are in
                during = ordinary_create_s(client)
                for thread in threads:
                    thread.join()
        finally:
            server.stop()
    print(f"2. an ordinary create (16 tokens) on an embedded server, {heavy} heavy requests at once:")
    print(f"   alone:  {alone:7.2f} s")
    print(f"   during: {during:7.2f} s  ({during / alone:.1f}x alone); heavy ones took {max(heavy_s):.1f} s at most")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--kb", type=int, default=10)
    parser.add_argument("--heavy", type=int, default=6)
    parser.add_argument("--skip-server", action="store_true", help="only figure 1")
    args = parser.parse_args()
    items = conversation(args.messages, args.kb)
    truncation_cpu(items)
    if not args.skip_server:
        stall(items, args.heavy)


if __name__ == "__main__":
    main()
