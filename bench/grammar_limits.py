"""What llama.cpp's grammar code survives: each case builds a grammar (the JSON Schema or regex converted as the
server converts it), hands it to llama.cpp and samples a few steps with it, in a SUBPROCESS of its own (a grammar
too deep overflows llama.cpp's stack and kills the process), and prints one row: whether it survived, how long
conversion, llama.cpp's build and the sampling steps took, and whether the server's bounds
(app/generation/grammars.py) refuse it.

    .venv/bin/python -m bench.grammar_limits [--steps 16] [--timeout 60] [--quick]

The server's bounds were chosen from this table with a margin: a bound sits well below the first size that
crashed or took over a second.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

#: Runs in the child: stdin is the case as JSON {"schema": ...} or {"grammar": ...}, argv[1] the sampling steps;
#: prints timings as JSON.
CHILD = r"""
import ctypes, json, sys, time
import llama_cpp
from llama_cpp.llama_grammar import json_schema_to_gbnf
from app.config import Settings

case = json.loads(sys.stdin.read())
steps = int(sys.argv[1])
started = time.perf_counter()
# The converter the server uses, without the server's bounds: what llama.cpp would get without them.
grammar = case["grammar"] if "grammar" in case else json_schema_to_gbnf(json.dumps(case["schema"]))
converted = time.perf_counter()
llama_cpp.llama_backend_init()
path = str(Settings(_env_file=None).resolved_model_path)
params = llama_cpp.llama_model_default_params()
params.vocab_only = True
model = llama_cpp.llama_model_load_from_file(path.encode(), params)
vocab = llama_cpp.llama_model_get_vocab(model)
n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
loaded = time.perf_counter()
sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
built = time.perf_counter()
if not sampler:
    print(json.dumps({"grammar_chars": len(grammar), "convert_s": converted - started, "build_s": built - loaded,
                      "error": "llama.cpp refused the grammar"}))
    sys.exit(0)
data = (llama_cpp.llama_token_data * n_vocab)()
taken, sampling_s = 0, 0.0
for step in range(steps):
    for token in range(n_vocab):
        data[token].id, data[token].logit, data[token].p = token, 0.0, 0.0
    array = llama_cpp.llama_token_data_array(data, n_vocab, -1, False)
    # Timed: llama.cpp's work alone (masking the vocabulary, then advancing), not this loop's Python.
    before = time.perf_counter()
    llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
    sampling_s += time.perf_counter() - before
    allowed = [data[i].id for i in range(array.size) if data[i].logit != float("-inf")]
    if not allowed:
        break
    # The longest allowed piece advances furthest into the grammar (deepest into its repetitions).
    token = max(allowed[:4096], key=lambda t: len(llama_cpp.llama_vocab_get_text(vocab, t) or b""))
    before = time.perf_counter()
    llama_cpp.llama_sampler_accept(sampler, token)
    sampling_s += time.perf_counter() - before
    taken += 1
print(json.dumps({"grammar_chars": len(grammar), "convert_s": converted - started, "build_s": built - loaded,
                  "sample_s": sampling_s / max(taken, 1), "steps": taken}))
"""


def string_max_length(n: int) -> dict[str, Any]:
    return {"schema": {"type": "string", "maxLength": n}}


def string_min_length(n: int) -> dict[str, Any]:
    return {"schema": {"type": "string", "minLength": n}}


def array_max_items(n: int) -> dict[str, Any]:
    return {"schema": {"type": "array", "items": {"type": "integer"}, "maxItems": n}}


def regex_repetition(n: int) -> dict[str, Any]:
    return {"schema": {"type": "string", "pattern": f"^a{{0,{n}}}$"}}


def nested_repetition(n: int) -> dict[str, Any]:
    """A bounded repetition of a bounded repetition: n x n."""
    return {"schema": {"type": "string", "pattern": f"^(a{{0,{n}}}){{0,{n}}}$"}}


def nested_objects(n: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(n):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return {"schema": schema}


def many_properties(n: int) -> dict[str, Any]:
    return {"schema": {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(n)}}}


def bounded_properties(n: int) -> dict[str, Any]:
    """n string properties of maxLength 500 each, all required."""
    properties = {f"p{i}": {"type": "string", "maxLength": 500} for i in range(n)}
    return {"schema": {"type": "object", "properties": properties, "required": list(properties)}}


def pattern_length(n: int) -> dict[str, Any]:
    return {"schema": {"type": "string", "pattern": "^" + "(ab|cd)" * (n // 7) + "$"}}


def many_variants(n: int) -> dict[str, Any]:
    return {"schema": {"anyOf": [{"type": "object", "properties": {f"v{i}": {"type": "integer"}}} for i in range(n)]}}


CASES = {
    "string maxLength": (string_max_length, [100, 500, 1000, 1001, 1500, 3000, 10000, 16000, 20000, 30000]),
    "string minLength": (string_min_length, [100, 1000, 3000, 10000, 30000]),
    "array maxItems": (array_max_items, [100, 500, 1000, 2000, 10000, 30000]),
    "regex a{0,n}": (regex_repetition, [100, 500, 1000, 3000, 10000, 30000]),
    "regex (a{0,n}){0,n}": (nested_repetition, [5, 10, 30, 100, 300]),
    "nested objects (depth)": (nested_objects, [10, 30, 60, 100, 200]),
    "properties": (many_properties, [100, 1000, 5000]),
    "properties maxLength 500": (bounded_properties, [4, 8, 16, 64]),
    "pattern chars": (pattern_length, [1000, 10000, 50000]),
    "anyOf variants": (many_variants, [10, 100, 1000]),
}


def refused_by_server(case: dict[str, Any]) -> str:
    """'400' when the server's bounds refuse the case before llama.cpp sees it, else 'passes'."""
    from app.generation.grammars import InvalidSchema, checked_grammar, json_schema_grammar

    try:
        checked_grammar(json_schema_grammar(case["schema"]))
    except InvalidSchema:
        return "400"
    except RecursionError:
        return "400"
    return "passes"


def run_case(case: dict[str, Any], steps: int, timeout_s: float) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        child = subprocess.run(
            [sys.executable, "-c", CHILD, str(steps)],
            input=json.dumps(case),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"outcome": f"timeout>{timeout_s:.0f}s"}
    wall_s = time.perf_counter() - started
    if child.returncode < 0:
        return {"outcome": f"CRASH (signal {-child.returncode})", "wall_s": wall_s}
    if child.returncode != 0:
        last = (child.stderr.strip().splitlines() or ["?"])[-1]
        return {"outcome": f"error: {last[:60]}", "wall_s": wall_s}
    result: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
    result["outcome"] = result.pop("error", "ok")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=16, help="sampling steps after building the grammar")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as hung")
    parser.add_argument("--quick", action="store_true", help="only the first three sizes of each case")
    args = parser.parse_args()
    print(
        f"{'case':<24} {'size':>7} {'outcome':<22} {'gbnf chars':>10} {'convert s':>9} {'build s':>8} "
        f"{'step s':>8} {'server':>7}"
    )
    for name, (make, sizes) in CASES.items():
        for size in sizes[:3] if args.quick else sizes:
            case = make(size)
            result = run_case(case, args.steps, args.timeout)

            def cell(key: str, width: int, result: dict[str, Any] = result) -> str:
                value = result.get(key)
                return f"{value:>{width}.3f}" if isinstance(value, float) else f"{'-':>{width}}"

            print(
                f"{name:<24} {size:>7} {result['outcome']:<22} {result.get('grammar_chars', '-'):>10} "
                f"{cell('convert_s', 9)} {cell('build_s', 8)} {cell('sample_s', 8)} {refused_by_server(case):>7}",
                flush=True,
            )


if __name__ == "__main__":
    main()
