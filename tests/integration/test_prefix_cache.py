"""Prefix reuse on the real model: chained and stateless turns prefill only what is new, the cache never
changes what the model says (temperature 0, against a server with reuse turned off), and it never crosses
tenants."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.fixtures.databases import sqlite_url
from tests.fixtures.server import SdkClients, ServerProcess

pytestmark = pytest.mark.integration

QUESTIONS = ["Name a fruit.", "What colour is it?", "Where does it grow?", "Name another one."]


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


def test_reuse_prefills_only_new_tokens_and_never_changes_the_output(tmp_path: Path, sdk: SdkClients) -> None:
    runs = {}
    for name, cache_mb in (("cached", "256"), ("uncached", "0")):
        server = _server(tmp_path, name, cache_mb)
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
            # The previous prompt is reused whole: only the previous answer and the new question are read.
            assert turn.usage.input_tokens_details.cached_tokens >= previous.usage.input_tokens, kind


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
