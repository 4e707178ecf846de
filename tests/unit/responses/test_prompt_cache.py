"""prompt_cache_options on create (parsed, echoed, prewarm, explicit mode) and prompt_cache_diagnostics on the fake
model, whose runs report the reused tokens the test sets (the real engine's reuse: tests/integration)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from openai.types.responses import Response

from app.responses import repository
from app.runtime import Runtime
from app.tenants.identity import OPEN_TENANT
from app.testing.fakes import FakeRenderer, FakeRunner
from tests.protocol import assert_error

FUNCTION = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}


async def create(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    reply = await client.post("/v1/responses", json={"input": "tell me about the weather today", **body})
    assert reply.status_code == 200, reply.text
    Response.model_validate(reply.json())
    return dict(reply.json())


@pytest.mark.parametrize(
    ("options", "param", "code"),
    [
        ({"ttl": "1h"}, "prompt_cache_options.ttl", "invalid_value"),
        ({"mode": "sometimes"}, "prompt_cache_options.mode", "invalid_value"),
        ({"prewarm": "yes"}, "prompt_cache_options.prewarm", "invalid_value"),
        ({"comparison_response_id": ""}, "prompt_cache_options.comparison_response_id", "invalid_value"),
        ({"comparison_response_id": 7}, "prompt_cache_options.comparison_response_id", "invalid_value"),
        ({"breakpoints": 2}, "prompt_cache_options.breakpoints", "unknown_parameter"),
        ("30m", "prompt_cache_options", "invalid_value"),
    ],
)
async def test_malformed_options_are_a_400_naming_the_field(
    client: httpx.AsyncClient, runner: FakeRunner, options: object, param: str, code: str
) -> None:
    reply = await client.post("/v1/responses", json={"input": "x", "prompt_cache_options": options})
    assert_error(reply, 400, param=param, code=code)
    assert runner.jobs == []


async def test_options_are_echoed_as_the_sdks_response_has_them(client: httpx.AsyncClient) -> None:
    plain = await create(client)
    assert plain["prompt_cache_options"] is None
    assert plain["prompt_cache_diagnostics"] is None
    defaults = await create(client, prompt_cache_options={})
    assert defaults["prompt_cache_options"] == {"mode": "implicit", "ttl": "30m", "comparison_response_id": None}
    assert defaults["prompt_cache_diagnostics"] is None
    stored = (await client.get(f"/v1/responses/{defaults['id']}")).json()
    assert stored["prompt_cache_options"] == defaults["prompt_cache_options"]


async def test_prewarm_reads_the_prompt_and_generates_nothing(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    warm = await create(client, prompt_cache_options={"prewarm": True, "ttl": "12h"})
    assert runner.jobs[-1].sampling.prefill_only
    assert warm["status"] == "completed"
    assert warm["output"] == []
    assert warm["usage"]["output_tokens"] == 0
    assert warm["prompt_cache_options"] == {"mode": "implicit", "ttl": "12h", "comparison_response_id": None}


async def test_explicit_mode_reads_the_prompt_cold(client: httpx.AsyncClient, runner: FakeRunner) -> None:
    await create(client, prompt_cache_options={"mode": "explicit"})
    assert not runner.jobs[-1].sampling.read_cache
    await create(client)
    assert runner.jobs[-1].sampling.read_cache


async def test_diagnostics_name_a_hit_only_when_the_engine_reused_the_prefix(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    first = await create(client)
    compare = {"prompt_cache_options": {"comparison_response_id": first["id"]}}
    # The fake model reused nothing: the prompts agree, yet the prefix was not reused.
    assert (await create(client, **compare))["prompt_cache_diagnostics"] == {"type": "unavailable"}
    runner.cached_tokens = 1000
    hit = await create(client, **compare)
    assert hit["prompt_cache_diagnostics"] == {"type": "cache_hit"}
    assert hit["prompt_cache_options"]["comparison_response_id"] == first["id"]
    assert (await client.get(f"/v1/responses/{hit['id']}")).json()["prompt_cache_diagnostics"] == {"type": "cache_hit"}


async def test_a_changed_setting_before_a_diverging_prompt_is_the_reason(
    client: httpx.AsyncClient, runner: FakeRunner
) -> None:
    first = await create(client)
    runner.cached_tokens = 1
    missed = await create(client, tools=[FUNCTION], prompt_cache_options={"comparison_response_id": first["id"]})
    diagnostics = missed["prompt_cache_diagnostics"]
    assert diagnostics["type"] == "cache_miss"
    assert diagnostics["reason"] == "tools_changed"
    assert diagnostics["cache_missed_tokens"] == missed["usage"]["input_tokens"] - 1
    Response.model_validate(missed)


async def test_an_unknown_or_foreign_comparison_is_not_found(
    two_tenants: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    alice, bob = two_tenants
    theirs = await create(alice)
    for wanted in ("resp_nope", theirs["id"]):
        reply = await create(bob, prompt_cache_options={"comparison_response_id": wanted})
        assert reply["prompt_cache_diagnostics"] == {"type": "comparison_response_not_found"}


async def test_every_stored_response_keeps_a_fingerprint(client: httpx.AsyncClient, app_runtime: Runtime) -> None:
    made = await create(client)
    async with app_runtime.database.read() as session:
        found, fingerprint = await repository.get_prompt_cache_fingerprint(session, made["id"], OPEN_TENANT)
    assert found
    assert fingerprint is not None
    assert fingerprint["tokens"] == made["usage"]["input_tokens"]


async def test_a_turn_chained_on_a_prewarm_is_compared_with_the_context_it_warmed(
    client: httpx.AsyncClient, renderer: FakeRenderer, runner: FakeRunner
) -> None:
    # As a chat template does, the fake renderer ends every prompt with the opening of the assistant's turn; a
    # warm-up has no answer after it, so the turn chained on it continues the context before that opening.
    renderer.generation_prompt = "assistant says:"
    warm = await create(client, prompt_cache_options={"prewarm": True})
    warmed = runner.jobs[-1].prompt_tokens
    runner.cached_tokens = 1000
    compare = {"prompt_cache_options": {"comparison_response_id": warm["id"]}}
    chained = await create(client, input="and tomorrow?", previous_response_id=warm["id"], **compare)
    assert runner.jobs[-1].prompt_tokens[: len(warmed) - 2] == warmed[:-2]
    assert chained["prompt_cache_diagnostics"] == {"type": "cache_hit"}
    # The same request again, with its generation: the warmed context with the same opening after it.
    assert (await create(client, **compare))["prompt_cache_diagnostics"] == {"type": "cache_hit"}
    # What a hit needs, the engine must have reused: here only the first token.
    runner.cached_tokens = 1
    unused = await create(client, input="and tomorrow?", previous_response_id=warm["id"], **compare)
    assert unused["prompt_cache_diagnostics"] == {"type": "unavailable"}
