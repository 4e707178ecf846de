"""Python calls a token of the output's way through the assembler (the family's parser, the items and events it
makes), counted with cProfile: a count, exact and the same on any machine, unlike the server's end to end figure
(bench.stream_overhead --calls, whose event-loop count moves with how many tokens each wake-up delivers).

For each family: its plain answer (`" bread"` a token) with no tools and no reasoning, then with a function
offered (the parser reads every token for call markup), then its reasoning and a call, each as the family writes
them (app/testing/scripted.tokens_of: a character a token, control tokens whole).

    .venv/bin/python -m bench.parser_calls [--tokens 256] [--json PATH]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
from pathlib import Path

from app.events.assembler import ResponseAssembler
from app.generation.dialects.families import DIALECTS, dialect_named
from app.generation.types import Finish
from app.schemas.responses import ResponseObject
from app.testing.scripted import tokens_of

WORD = " bread"
TOOLS: dict[str, str | None] = {"get_weather": None}


def calls_per_token(family: str, pieces: list[str], *, tools: bool, reasoning: bool) -> float:
    dialect = dialect_named(family)

    def run() -> None:
        response = ResponseObject(id="resp_bench", created_at=0, status="in_progress", model="m")
        tags = dialect.reasoning if reasoning else None
        assembler = ResponseAssembler(response, TOOLS if tools else None, tags, dialect=family)
        assembler.start()
        for piece in pieces:
            assembler.text(piece)
        assembler.finish(Finish("stop", 1, 0, len(pieces)), completed_at=1)

    run()  # imports and caches warm
    profile = cProfile.Profile()
    profile.enable()
    run()
    profile.disable()
    total: int = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
    return round(total / len(pieces), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    plain = [WORD] * args.tokens
    results: dict[str, dict[str, float]] = {}
    for dialect in DIALECTS:
        reasoning = dialect.reasoning or ("<|channel|>analysis<|message|>", "<|end|><|start|>assistant")
        call = {
            "harmony": ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}',
        }.get(dialect.name, "")
        written = f"{reasoning[0]}{WORD * 32}{reasoning[1]}{WORD * 32}{call}"
        results[dialect.name] = {
            "plain": calls_per_token(dialect.name, plain, tools=False, reasoning=False),
            "tools_offered": calls_per_token(dialect.name, plain, tools=True, reasoning=False),
            "reasoning_then_text": calls_per_token(
                dialect.name, list(tokens_of(written, dialect)), tools=True, reasoning=True
            ),
        }
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
