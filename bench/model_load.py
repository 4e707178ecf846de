"""Time to first token of a cold model (its load included) against a warm one (issue 12).

    .venv/bin/python -m bench.model_load [--rounds 5]

An embedded server declares two aliases of the shipped GGUF and keeps one model loaded at a time
(RESPONSES_MAX_LOADED_MODELS=1), so each request for the other model loads it (and unloads the first). Each round
streams one request to the cold model, then one to it again, warm; the figure is each one's time from the request
to its first output text delta (median over the rounds), and cold / warm as a ratio. Both models answer once
before the rounds, so that their vocabularies (loaded once per process) are not counted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from app.config import Settings
from app.testing.servers import ServerProcess

MODELS = ("first", "second")


def time_to_first_token_ms(client: httpx.Client, model: str) -> float:
    body = {"model": model, "input": "Say hi.", "max_output_tokens": 16, "stream": True, "store": False}
    started = time.perf_counter()
    with client.stream("POST", "/v1/responses", json=body) as reply:
        reply.raise_for_status()
        for line in reply.iter_lines():
            if line.startswith("data: ") and '"response.output_text.delta"' in line:
                return (time.perf_counter() - started) * 1000
    raise RuntimeError(f"{model} wrote no text")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    shipped = Settings(_env_file=None).resolved_model_path
    with tempfile.TemporaryDirectory() as directory:
        env = {
            "RESPONSES_DATABASE_URL": f"sqlite+aiosqlite:///{directory}/bench.db",
            "RESPONSES_MODELS": ",".join(f"{model}={shipped}" for model in MODELS),
            "RESPONSES_MAX_LOADED_MODELS": "1",
        }
        server = ServerProcess(env, Path(directory) / "server.log").start()
        cold: list[float] = []
        warm: list[float] = []
        try:
            with httpx.Client(base_url=server.base_url, timeout=120) as client:
                for model in MODELS:
                    time_to_first_token_ms(client, model)
                for round_number in range(args.rounds):
                    model = MODELS[round_number % 2]  # the other one is loaded: this one is cold
                    cold.append(time_to_first_token_ms(client, model))
                    warm.append(time_to_first_token_ms(client, model))
        finally:
            server.stop()
    figures = {
        "model": shipped.name,
        "model_mb": round(shipped.stat().st_size / 2**20, 1),
        "rounds": args.rounds,
        "cold_ttft_ms": round(statistics.median(cold), 1),
        "warm_ttft_ms": round(statistics.median(warm), 1),
        "cold_over_warm": round(statistics.median(cold) / statistics.median(warm), 1),
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
