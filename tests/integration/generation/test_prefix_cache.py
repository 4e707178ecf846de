"""Prefix reuse on the real model: by default chained and stateless turns prefill only what is new (the
previous answer included); in exact mode the cache never changes what the model says (temperature 0, against a
server with reuse turned off); and it never crosses tenants."""

from __future__ import annotations

import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import openai
import pytest

from app.config import Settings
from app.generation import engine as engine_module
from app.generation.engine import GenerationRequest, LlamaEngine
from app.generation.kv.prefix_cache import PrefixCache
from app.generation.kv.reuse import EXACT_CHUNK
from app.generation.types import Finish, GenerationFailed, GenerationOutput, SamplingParams
from app.testing.databases import sqlite_url
from app.testing.servers import SdkClients, ServerProcess

pytestmark = pytest.mark.integration

QUESTIONS = ["Name a fruit.", "What colour is it?", "Where does it grow?", "Name another one."]
#: The case that once drifted on a hit (the last prompt token re-read alone); instructions make the prompt
#: longer than one exact-mode chunk, so the repeats do hit.
BANANA = "Repeat the word 'banana' 3000 times."
BANANA_INSTRUCTIONS = "You are a helpful assistant. " + "Do exactly what the user asks, nothing more. " * 4


def _conversations(client: openai.OpenAI, model: str) -> dict[str, list[Any]]:
    """Two conversations, their turns interleaved so each turn finds the other's tokens in the one slot:
    one chained by previous_response_id, one stateless (store: false, resending the history)."""
    chained: list[Any] = []
    stateless: list[Any] = []
    history: list[dict[str, Any]] = []
    for question in QUESTIONS:
        chained.append(
            client.responses.create(
                model=model,
                input=question,
                previous_response_id=chained[-1].id if chained else None,
                temperature=0,
                max_output_tokens=24,
            )
        )
        history.append({"role": "user", "content": question})
        turn = client.responses.create(
            model=model, input=history, store=False, temperature=0, max_output_tokens=24, prompt_cache_key="fruit"
        )
        history.extend(item.model_dump(exclude_none=True) for item in turn.output)
        stateless.append(turn)
    return {"chained": chained, "stateless": stateless}


def _server(tmp_path: Path, name: str, cache_mb: str, **extra: str) -> ServerProcess:
    env = {
        **extra,
        "RESPONSES_DATABASE_URL": sqlite_url(tmp_path / name),
        "RESPONSES_PREFIX_CACHE_MB": cache_mb,
        # One sequence: every turn finds the other conversation's tokens there and must use the cache.
        "RESPONSES_WORKER_CONCURRENCY": "1",
    }
    (tmp_path / name).mkdir()
    return ServerProcess(env, tmp_path / f"{name}.log").start()


def test_by_default_a_turn_reads_only_its_new_tokens(tmp_path: Path, sdk: SdkClients) -> None:
    server = _server(tmp_path, "default", "256")
    try:
        client = sdk(server.base_url)
        runs = _conversations(client, client.models.list().data[0].id)
    finally:
        server.stop()

    for kind, turns in runs.items():
        for previous, turn in pairwise(turns):
            # The previous prompt and the previous answer are reused: only the message markers around the
            # answer and the new question are read (the final token of the answer was never decoded when the
            # answer ended on its length limit).
            answer_end = 1 if previous.status == "incomplete" else 0
            reused = previous.usage.input_tokens + previous.usage.output_tokens - answer_end
            assert turn.usage.input_tokens_details.cached_tokens >= reused, (kind, turn.usage)


def test_exact_mode_never_changes_the_output(tmp_path: Path, sdk: SdkClients) -> None:
    runs = {}
    for name, cache_mb in (("cached", "256"), ("uncached", "0")):
        server = _server(tmp_path, name, cache_mb, RESPONSES_KV_REUSE="exact")
        try:
            client = sdk(server.base_url)
            runs[name] = _conversations(client, client.models.list().data[0].id)
        finally:
            server.stop()

    for kind in ("chained", "stateless"):
        cached, uncached = runs["cached"][kind], runs["uncached"][kind]
        assert [turn.output_text for turn in cached] == [turn.output_text for turn in uncached], kind
        assert all(turn.usage.input_tokens_details.cached_tokens == 0 for turn in uncached)
        for previous, turn in pairwise(cached):
            # The previous prompt is reused up to its last whole chunk; its answer is read again.
            whole_chunks = previous.usage.input_tokens - previous.usage.input_tokens % EXACT_CHUNK
            assert turn.usage.input_tokens_details.cached_tokens >= whole_chunks, kind


@pytest.mark.parametrize("threads", ["1", "2"])
def test_exact_mode_hits_give_the_cold_output_token_for_token(tmp_path: Path, sdk: SdkClients, threads: str) -> None:
    server = _server(tmp_path, f"banana{threads}", "256", RESPONSES_KV_REUSE="exact", RESPONSES_N_THREADS=threads)
    try:
        client = sdk(server.base_url)
        model = client.models.list().data[0].id
        for instructions in (None, BANANA_INSTRUCTIONS):
            turns = [
                client.responses.create(
                    model=model, instructions=instructions, input=BANANA, temperature=0, max_output_tokens=48
                )
                for _ in range(3)
            ]
            assert [turn.output_text for turn in turns] == [turns[0].output_text] * 3, instructions
            if instructions is not None:
                assert all(turn.usage.input_tokens_details.cached_tokens >= EXACT_CHUNK for turn in turns[1:])
    finally:
        server.stop()


def test_one_tenant_never_reuses_another_tenants_prefix(tmp_path: Path, sdk: SdkClients) -> None:
    # One sequence: beta's request lands on the cells alpha's left, and alpha's next on beta's.
    server = _server(tmp_path, "tenants", "256", RESPONSES_API_KEYS="alpha,beta")
    try:
        alpha, beta = sdk(server.base_url, "alpha"), sdk(server.base_url, "beta")
        model = alpha.models.list().data[0].id

        def cached(client: openai.OpenAI) -> tuple[int, int]:
            turn = client.responses.create(
                model=model, input=QUESTIONS[0], store=False, temperature=0, max_output_tokens=16, prompt_cache_key="k"
            )
            assert turn.usage is not None
            return turn.usage.input_tokens_details.cached_tokens, turn.usage.input_tokens

        assert cached(alpha)[0] == 0
        assert cached(beta)[0] == 0, "beta reused alpha's prompt"
        # Each tenant still reuses its own prompt, from the saved states (the one sequence holds the other's).
        for client in (alpha, beta):
            reused, prompt = cached(client)
            assert reused == prompt - 1
    finally:
        server.stop()


def test_a_large_state_is_saved_only_once_no_other_generation_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every state counts as large: none is copied while another sequence runs.
    monkeypatch.setattr(engine_module, "SAVE_WHILE_RUNNING_BYTES", 0)
    cache = PrefixCache(256 * 2**20)
    engine = LlamaEngine(Settings().resolved_model_path, n_ctx=1024, n_threads=2, slots=2, prefix_cache=cache)
    try:
        running = _Collector()
        # A grammar that never completes: the stream runs until it is cancelled.
        endless = SamplingParams(temperature=0, top_p=1, max_output_tokens=None, grammar='root ::= "a" root')
        stream = GenerationRequest(engine.tokenize("Write the letter a."), endless, running.emit, "stream")
        engine.submit(stream)
        assert running.first_piece.wait(60)
        short = _Collector()
        prompt = engine.tokenize("Name a fruit.")
        engine.submit(GenerationRequest(prompt, SamplingParams(0, 1, 1), short.emit, "short"))
        assert short.finished.wait(60)
        assert not running.finished.is_set()
        assert cache.best_match("short", prompt) is None, "copied while another sequence ran"

        stream.cancelled.set()
        assert running.finished.wait(60)
        deadline = time.monotonic() + 30
        while cache.best_match("short", prompt) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        match = cache.best_match("short", prompt)
        assert match is not None and match[0] == len(prompt), "not saved once the engine was idle"
    finally:
        engine.close()


class _Collector:
    def __init__(self) -> None:
        self.first_piece = threading.Event()
        self.finished = threading.Event()

    def emit(self, output: GenerationOutput) -> None:
        if isinstance(output, Finish | GenerationFailed):
            self.finished.set()
        else:
            self.first_piece.set()


def test_a_12h_state_is_kept_in_a_file_and_found_again_after_a_restart(tmp_path: Path, sdk: SdkClients) -> None:
    """prompt_cache_options.ttl "12h": the state is written to RESPONSES_PREFIX_CACHE_DIR; a restarted server (its
    memory cache empty) restores it from there. A "30m" state stays in memory only: after the restart it is gone."""
    files = tmp_path / "states"
    server = _server(tmp_path, "ttl", "256", RESPONSES_PREFIX_CACHE_DIR=str(files))
    instructions = {"12h": BANANA_INSTRUCTIONS + "(kept)", "30m": BANANA_INSTRUCTIONS + "(memory)"}
    try:
        client = sdk(server.base_url)
        model = client.models.list().data[0].id
        warm = {
            ttl: client.responses.create(
                model=model, instructions=text, input=BANANA, prompt_cache_options={"prewarm": True, "ttl": ttl}
            )
            for ttl, text in instructions.items()
        }
    finally:
        server.stop()
    assert len(list(files.glob("*/*.kvstate"))) == 1
    server.start()
    try:
        client = sdk(server.base_url)
        again = {
            ttl: client.responses.create(
                model=model,
                instructions=text,
                input=BANANA,
                max_output_tokens=16,
                temperature=0,
                prompt_cache_options={"comparison_response_id": warm[ttl].id},
            )
            for ttl, text in instructions.items()
        }
    finally:
        server.stop()
    kept = again["12h"]
    assert kept.usage is not None and warm["12h"].usage is not None
    assert kept.usage.input_tokens_details.cached_tokens == warm["12h"].usage.input_tokens - 1
    assert kept.prompt_cache_diagnostics is not None and kept.prompt_cache_diagnostics.type == "cache_hit"
    lost = again["30m"]
    assert lost.prompt_cache_diagnostics is not None and lost.prompt_cache_diagnostics.type == "unavailable"
