"""Property-based fuzzing: requests that schemathesis generates from the app's own OpenAPI document, valid and
invalid, half of them carrying a hostile value (tests/fuzz/hostile.py), sent in-process to a keyed server with
the model double, on SQLite and on Postgres. No request may answer a 5xx or break its body; every status must
be one the document lists, every error OpenAI-shaped; and everything stored must read back.

Deterministic (derandomized, no example database) and bounded: RESPONSES_FUZZ_EXAMPLES examples per operation
and generation mode (default 8). `RESPONSES_FUZZ_EXAMPLES=350 pytest tests/fuzz -s` is the large run
(about 10,000 requests a database)."""

from __future__ import annotations

import copy
import json
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core import NOT_SET

from app.config import Settings
from app.db.migrations import upgrade_to_head
from app.main import create_app
from app.testing.databases import fresh_postgres_database
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation
from tests.fuzz.hostile import HOSTILE_AUTHORIZATION, HOSTILE_PATH_TEXT, HOSTILE_QUERY_TEXT, mutate_body

EXAMPLES = int(os.environ.get("RESPONSES_FUZZ_EXAMPLES", "8"))
KEY = "fuzz-key"
AUTH = {"authorization": f"Bearer {KEY}"}
ERROR_FIELDS = {"message", "type", "param", "code"}
#: What a path may hold unencoded (RFC 3986's unreserved and sub-delimiters, "/", ":", "@"), and "%".
URL_SAFE = "/:@!$&'()*+,;=-._~%"


@dataclass
class FuzzTarget:
    """The app, running in a portal thread's event loop, and what the run has seen."""

    portal: BlockingPortal
    client: httpx.AsyncClient
    document: dict[str, Any]
    #: Ids that exist (seeded, or created by the fuzz), by path parameter name: cases use them some of the time.
    known: dict[str, list[str]]
    statuses: Counter[int] = field(default_factory=Counter)
    created: list[str] = field(default_factory=list)

    def send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        async def request() -> httpx.Response:
            # The body is read in full: a stream that breaks half-way raises here.
            return await self.client.request(method, url, **kwargs)

        return self.portal.call(request)


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FuzzTarget]:
    with _database(request.param, tmp_path) as url:
        app_settings = Settings(database_url=url, model_id="fake-model", api_keys=KEY, _env_file=None)
        app = create_app(app_settings, fake_generation(FakeRenderer(), FakeRunner()))
        with start_blocking_portal() as portal, portal.wrap_async_context_manager(app.router.lifespan_context(app)):
            client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://fuzz", headers=AUTH)
            try:
                fuzz = FuzzTarget(portal, client, app.openapi(), known={})
                _seed(fuzz)
                yield fuzz
            finally:
                portal.call(client.aclose)


@contextmanager
def _database(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'fuzz.db'}"
        return
    with fresh_postgres_database() as url:
        upgrade_to_head(url)
        yield url


def _seed(fuzz: FuzzTarget) -> None:
    """A stored response and a conversation with items, so that cases reach existing objects too."""
    created = fuzz.send("POST", "/v1/responses", json={"input": "seed", "max_output_tokens": 16}).json()
    conversation = fuzz.send("POST", "/v1/conversations", json={"items": [{"role": "user", "content": "hi"}]}).json()
    items = fuzz.send("GET", f"/v1/conversations/{conversation['id']}/items").json()
    fuzz.known = {
        "response_id": [created["id"]],
        "conversation_id": [conversation["id"]],
        "item_id": [item["id"] for item in items["data"]],
    }
    fuzz.created.append(created["id"])


def _request_of(case: schemathesis.Case, body: Any, extra_headers: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """The case (with `body`) as httpx arguments. JSON is encoded as a client would (ASCII, escapes kept, so a
    lone surrogate reaches the server as `\\ud800`)."""
    kwargs: dict[str, Any] = {"params": case.query or None}
    # The client sends the server's key: schemathesis's random bearer tokens would only ever reach the 401.
    headers: dict[str, Any] = {
        key: value for key, value in (case.headers or {}).items() if key.lower() != "authorization"
    }
    headers.update(extra_headers)
    if body is not NOT_SET:
        kwargs["content"] = body if isinstance(body, bytes | str) else json.dumps(body)
        headers.setdefault("content-type", case.media_type or "application/json")
    kwargs["headers"] = headers
    # Percent-encoded as a client would (NUL and non-ASCII included); what is already encoded stays as it is.
    return case.method.upper(), quote(case.formatted_path, safe=URL_SAFE), kwargs


def _make_hostile(data: st.DataObject, case: schemathesis.Case, fields: list[str]) -> tuple[Any, dict[str, Any]]:
    """Hostile values in half the cases' body, path, query or key (see hostile.py): the body to send, and
    headers to send with it."""
    body = case.body if case.body is NOT_SET else copy.deepcopy(case.body)
    if not data.draw(st.booleans(), label="hostile"):
        return body, {}
    place = data.draw(st.sampled_from(["body", "path", "query", "authorization"]), label="hostile place")
    if place == "body" and body is not NOT_SET:
        return mutate_body(data, body, fields), {}
    if place == "path" and case.path_parameters:
        name = data.draw(st.sampled_from(sorted(case.path_parameters)))
        case.path_parameters[name] = data.draw(st.sampled_from(HOSTILE_PATH_TEXT))
    elif place == "query" and case.query:
        name = data.draw(st.sampled_from(sorted(case.query)))
        case.query[name] = data.draw(st.sampled_from(HOSTILE_QUERY_TEXT))
    elif place == "authorization":
        return body, {"authorization": data.draw(st.sampled_from(HOSTILE_AUTHORIZATION))}
    return body, {}


def _check(fuzz: FuzzTarget, case: schemathesis.Case, reply: httpx.Response) -> None:
    request = reply.request
    fuzz.statuses[reply.status_code] += 1
    where = f"{request.method} {request.url} {request.headers.get('authorization')!r} {request.content[:300]!r}"
    assert reply.status_code < 500, f"{reply.status_code} for {where}: {reply.text[:300]}"
    documented = fuzz.document["paths"][case.path][case.method.lower()]["responses"]
    assert str(reply.status_code) in documented, f"undocumented {reply.status_code} for {where}"
    if reply.status_code >= 400:
        assert set(reply.json()["error"]) == ERROR_FIELDS, where
    elif reply.headers.get("content-type", "").startswith("application/json"):
        body = reply.json()
        if isinstance(body, dict) and str(body.get("id", "")).startswith("resp_") and body.get("object") == "response":
            fuzz.created.append(body["id"])


def _body_fields(document: dict[str, Any], operation: dict[str, Any]) -> list[str]:
    """The top-level fields of an operation's JSON body (where a hostile value may be added)."""
    ref = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    name = str(ref.get("$ref", "")).rsplit("/", 1)[-1]
    return sorted(document["components"]["schemas"].get(name, {}).get("properties", {}))


def _fuzz_operation(fuzz: FuzzTarget, operation: Any, mode: GenerationMode) -> None:
    fields = _body_fields(fuzz.document, fuzz.document["paths"][operation.path][operation.method.lower()])

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(case=operation.as_strategy(generation_mode=mode), data=st.data())
    def run(case: schemathesis.Case, data: st.DataObject) -> None:
        for name in list(case.path_parameters or {}):
            if fuzz.known.get(name) and data.draw(st.booleans(), label=f"known {name}"):
                case.path_parameters[name] = data.draw(st.sampled_from(fuzz.known[name]))
        body, extra_headers = _make_hostile(data, case, fields)
        method, url, kwargs = _request_of(case, body, extra_headers)
        try:
            reply = fuzz.send(method, url, **kwargs)
        except (UnicodeEncodeError, httpx.LocalProtocolError):
            return  # not expressible as an HTTP request (a header no client could send)
        _check(fuzz, case, reply)

    run()


def test_no_generated_request_breaks_the_server(target: FuzzTarget) -> None:
    schema = schemathesis.openapi.from_dict(target.document)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    for operation in operations:
        described = target.document["paths"][operation.path][operation.method.lower()]
        # An operation that reads no parameter and no body has no invalid form to generate.
        takes_input = "parameters" in described or "requestBody" in described
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE) if takes_input else (GenerationMode.POSITIVE,):
            _fuzz_operation(target, operation, mode)
    # Everything that was stored reads back (no poison rows), and the server still answers.
    for response_id in target.created:
        assert target.send("GET", f"/v1/responses/{response_id}").status_code in (200, 404)
        assert target.send("GET", f"/v1/responses/{response_id}/input_items").status_code in (200, 404)
    assert target.send("GET", "/health").status_code == 200
    total = sum(target.statuses.values())
    print(f"\nfuzz: {total} requests, statuses {dict(sorted(target.statuses.items()))}")
    assert total >= len(operations) * EXAMPLES, "most generated cases never reached the server"
