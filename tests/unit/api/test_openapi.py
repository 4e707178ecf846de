"""The OpenAPI document describes the real API (request bodies, the errors that happen, auth), and /docs,
/redoc and /openapi.json follow the API's keys unless RESPONSES_PUBLIC_DOCS opens them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from app.config import Settings
from app.main import create_app
from app.testing.fakes import FakeRenderer, FakeRunner, fake_generation

DOC_PATHS = ("/openapi.json", "/docs", "/redoc")
#: Every route that reads a body (JSON; an upload's multipart), and whether the body is required.
BODIES = {
    ("post", "/v1/responses"): True,
    ("post", "/v1/responses/compact"): True,
    ("post", "/v1/responses/input_tokens"): True,
    ("post", "/v1/conversations"): False,
    ("post", "/v1/conversations/{conversation_id}"): True,
    ("post", "/v1/conversations/{conversation_id}/items"): True,
    ("post", "/v1/keys"): True,
    ("post", "/v1/projects/{project_id}/limits"): True,
    ("post", "/v1/webhook_endpoints"): True,
    ("post", "/v1/webhook_endpoints/{webhook_endpoint_id}"): False,
    ("post", "/v1/webhook_endpoints/{webhook_endpoint_id}/rotate_secret"): False,
    ("post", "/v1/webhook_endpoints/{webhook_endpoint_id}/test"): True,
    ("post", "/v1/files"): True,
    ("post", "/v1/batches"): True,
    ("post", "/v1/vector_stores"): True,
    ("post", "/v1/vector_stores/{vector_store_id}"): True,
    ("post", "/v1/vector_stores/{vector_store_id}/search"): True,
    ("post", "/v1/vector_stores/{vector_store_id}/files"): True,
    ("post", "/v1/vector_stores/{vector_store_id}/files/{file_id}"): True,
    ("post", "/v1/vector_stores/{vector_store_id}/file_batches"): True,
    ("post", "/v1/embeddings"): True,
}


@pytest.fixture
async def keyed(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[httpx.AsyncClient]:
    """A server with keys; `public_docs` as the test's parameter says (default off)."""
    public = getattr(request, "param", False)
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'docs.db'}",
        model_id="m",
        api_keys="alpha",
        public_docs=public,
        _env_file=None,
    )
    app = create_app(settings, fake_generation(FakeRenderer(), FakeRunner()))
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        yield client


def _operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _validator(document: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    """Validates against `schema`, resolving #/components/... in the document."""
    registry: Registry[Any] = Registry().with_resource("urn:doc", DRAFT202012.create_resource(document))
    rooted = {**schema, "$ref": "urn:doc" + schema["$ref"]} if "$ref" in schema else schema
    return jsonschema.Draft202012Validator(rooted, registry=registry)


async def test_every_body_is_described_and_every_reference_resolves(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    described = {
        (method, path): operation["requestBody"]["required"]
        for method, path, operation in _operations(document)
        if "requestBody" in operation
    }
    assert described == BODIES
    schemas = document["components"]["schemas"]
    for ref in set(_refs(document)):
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[-1] in schemas, ref
    assert "x-pending-schemas" not in str(document)


async def test_no_422_and_the_real_errors_with_their_body(client: httpx.AsyncClient, settings: Settings) -> None:
    document = (await client.get("/openapi.json")).json()
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for method, path, operation in _operations(document):
        statuses = set(operation["responses"])
        assert "422" not in statuses, (method, path)
        if path.startswith("/v1/"):
            assert {"400", "429"} <= statuses, (method, path)
            assert ("413" in statuses) == ("requestBody" in operation), (method, path)
            assert "503" in statuses, (method, path)  # /v1/models asks the queue which workers serve what
        if "{" in path:
            assert "404" in statuses, (method, path)
        # An open server asks for no key: no 401 and no scheme.
        assert "401" not in statuses
    assert "securitySchemes" not in document["components"] and "security" not in document

    # What the server answers for a bad request is what the document says it answers.
    create = document["paths"]["/v1/responses"]["post"]
    reply = await client.post("/v1/responses", json={"input": "hi", "temperature": 7})
    assert reply.status_code == 400
    _validator(document, create["responses"]["400"]["content"]["application/json"]["schema"]).validate(reply.json())
    too_large = await client.post("/v1/responses", content=b"x" * (settings.max_request_bytes + 1))
    assert too_large.status_code == 413 and "413" in create["responses"]
    missing = await client.get("/v1/responses/resp_missing")
    assert missing.status_code == 404
    read = document["paths"]["/v1/responses/{response_id}"]["get"]
    _validator(document, read["responses"]["404"]["content"]["application/json"]["schema"]).validate(missing.json())


async def test_the_create_body_schema_accepts_what_the_server_accepts(client: httpx.AsyncClient) -> None:
    document = (await client.get("/openapi.json")).json()
    body = document["paths"]["/v1/responses"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    validator = _validator(document, body)
    accepted = [
        {"input": "hi", "max_output_tokens": 16},
        {
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
            "instructions": "Be brief.",
            "temperature": 0,
            "metadata": {"k": "v"},
            "text": {"format": {"type": "json_schema", "name": "t", "schema": {"type": "object"}}},
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        },
    ]
    for payload in accepted:
        assert (await client.post("/v1/responses", json=payload)).status_code == 200
        validator.validate(payload)
    # A missing input is refused by both.
    assert (await client.post("/v1/responses", json={"model": "fake-model"})).status_code == 400
    assert not validator.is_valid({"model": "fake-model"})
    counted = document["paths"]["/v1/responses/input_tokens"]["post"]["requestBody"]["content"]["application/json"]
    assert _validator(document, counted["schema"]).is_valid({"instructions": "no input needed"})


async def test_a_keyed_server_shows_a_stranger_nothing(keyed: httpx.AsyncClient) -> None:
    for path in DOC_PATHS:
        for headers in ({}, {"authorization": "Bearer wrong"}):
            reply = await keyed.get(path, headers=headers)
            assert reply.status_code == 401, path
            assert reply.json()["error"]["type"] == "authentication_error"
            assert "openapi" not in reply.text and "/v1/responses" not in reply.text
        assert (await keyed.get(path, headers={"authorization": "Bearer alpha"})).status_code == 200, path
    document = (await keyed.get("/openapi.json", headers={"authorization": "Bearer alpha"})).json()
    assert document["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "One of the server's RESPONSES_API_KEYS.",
    }
    assert document["security"] == [{"bearerAuth": []}]
    assert document["paths"]["/health"]["get"]["security"] == []
    for method, path, operation in _operations(document):
        if path.startswith("/v1/"):
            assert "401" in operation["responses"], (method, path)


@pytest.mark.parametrize("keyed", [True], indirect=True)
async def test_public_docs_opens_only_the_docs(keyed: httpx.AsyncClient) -> None:
    for path in DOC_PATHS:
        assert (await keyed.get(path)).status_code == 200, path
    assert "swagger-ui" in (await keyed.get("/docs")).text
    assert (await keyed.get("/v1/models")).status_code == 401
