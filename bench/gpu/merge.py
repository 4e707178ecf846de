"""One run's JSON from the JSON of several `bench.run --only PART` runs (bench/gpu/run.sh runs each part under a
deadline of its own, so that a part cut short loses only itself), and its table, as `bench.run --table` prints it.

    python -m bench.gpu.merge [--json merged.json] part.json [part.json ...]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.figures import figures_from
from bench.report import format_table

#: What describes the run rather than a part: the first part's stands for all of them.
RUN_KEYS = {"date", "machine", "threads", "sizes", "gpu_offload", "profile_dir"}


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Parts side by side; a section two parts both fill (memory, say) gets the keys of each."""
    merged: dict[str, Any] = {"parts": [], "left_out": []}
    for run in runs:
        for key, value in run.items():
            if key == "parts":
                merged["parts"] = sorted({*merged["parts"], *value})
            elif key == "left_out":
                merged["left_out"] += [line for line in value if line not in merged["left_out"]]
            elif key in RUN_KEYS:
                merged.setdefault(key, value)
            elif isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parts", type=Path, nargs="+", help="the JSON of each part's run (bench.run --json)")
    parser.add_argument("--json", type=Path, help="also write the merged JSON here")
    args = parser.parse_args()
    results = merge([json.loads(path.read_text()) for path in args.parts])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print(f"bench.run {results.get('date')}: {results.get('machine')}, {results.get('threads')} llama.cpp threads\n")
    print(format_table(figures_from(results)))


if __name__ == "__main__":
    main()
