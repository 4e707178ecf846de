"""The OpenAPI document as the API really is. The routes parse raw bodies (for our own 400s and strict mode), so
FastAPI cannot see their request bodies: each route names its pydantic request schema with `json_body`, and
`describe_api` moves those schemas into the document's components. It also lists the errors each route really
answers with (OpenAI's error body; never FastAPI's 422, which our handlers turn into a 400) and, on a keyed
server, the bearer scheme."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from app.config import Settings
from app.schemas.errors import ErrorBody

SCHEMA_REF = "#/components/schemas/"
#: Where json_body leaves a body's schemas for describe_api to move into components (never in the document).
_PENDING = "x-pending-schemas"
BEARER = "bearerAuth"

ERROR_DESCRIPTIONS = {
    400: "The request is invalid: the error names the parameter (`param`) and why (`code`).",
    401: "No API key, or an unknown one.",
    403: "The API key's role may not do this: a `read` key writing, a key that is not an admin's on the key API.",
    404: "No such object for this API key.",
    409: "The Idempotency-Key was sent before with another request, or its first request is still running.",
    413: "The request body is larger than this server accepts.",
    429: "Too many requests in flight for this API key; `Retry-After` says when to try again.",
    500: "The server failed (a bug, or the model could not produce a result).",
    503: "The database, the job queue or every worker is unavailable; try again shortly.",
}
#: What any /v1 operation may answer, besides its own: an invalid parameter (a NUL in the URL, at least), too
#: many requests in flight for the key, and a backing service down.
COMMON_ERRORS = (400, 429, 503)


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route: these error statuses, each with the error body."""
    return {status: {"model": ErrorBody, "description": ERROR_DESCRIPTIONS[status]} for status in statuses}


def json_body(
    model: type[BaseModel], *, required: bool = True, fields: Collection[str] | None = None
) -> dict[str, Any]:
    """`openapi_extra=` for a route that parses its JSON body itself: the body is `model` (`fields`: only
    those of its properties, none required, as for input_tokens' subset of create's)."""
    schema = model.model_json_schema(ref_template=SCHEMA_REF + "{model}", mode="validation")
    definitions: dict[str, Any] = schema.pop("$defs", {})
    name = model.__name__
    if fields is not None:
        name = f"{name}Fields"
        schema["properties"] = {key: value for key, value in schema["properties"].items() if key in fields}
        schema.pop("required", None)
        schema["title"] = name
    definitions[name] = schema
    return {
        "requestBody": {
            "required": required,
            "content": {"application/json": {"schema": {"$ref": SCHEMA_REF + name}}},
        },
        _PENDING: definitions,
    }


def _renamed_refs(node: Any, renames: dict[str, str]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(SCHEMA_REF) and ref[len(SCHEMA_REF) :] in renames:
            return {**node, "$ref": SCHEMA_REF + renames[ref[len(SCHEMA_REF) :]]}
        return {key: _renamed_refs(value, renames) for key, value in node.items()}
    if isinstance(node, list):
        return [_renamed_refs(value, renames) for value in node]
    return node


def _add_schemas(components: dict[str, Any], operation: dict[str, Any]) -> None:
    """Move a body's schemas into components. A name FastAPI already used for another schema (a response
    model's serialisation form, say) gets an `Input` suffix, and the body's references follow it."""
    pending: dict[str, Any] = operation.pop(_PENDING, {})
    renames = {name: f"{name}Input" for name, schema in pending.items() if components.get(name, schema) != schema}
    for name, schema in pending.items():
        components[renames.get(name, name)] = _renamed_refs(schema, renames)
    operation["requestBody"] = _renamed_refs(operation["requestBody"], renames)


def _operations(document: dict[str, Any]) -> Iterable[tuple[str, dict[str, Any]]]:
    for path, item in document.get("paths", {}).items():
        for operation in item.values():
            yield path, operation


def _error_ref() -> dict[str, Any]:
    return {"application/json": {"schema": {"$ref": SCHEMA_REF + ErrorBody.__name__}}}


def describe_api(app: FastAPI, settings: Settings) -> dict[str, Any]:
    """The document served at /openapi.json (built once per app)."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    document = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas.setdefault(ErrorBody.__name__, ErrorBody.model_json_schema(ref_template=SCHEMA_REF + "{model}"))
    for name, schema in ErrorBody.model_json_schema(ref_template=SCHEMA_REF + "{model}").get("$defs", {}).items():
        schemas.setdefault(name, schema)
    schemas[ErrorBody.__name__].pop("$defs", None)
    for path, operation in _operations(document):
        if _PENDING in operation:
            _add_schemas(schemas, operation)
        responses = operation.setdefault("responses", {})
        # Parameters FastAPI validates fail with our 400, never its 422.
        responses.pop("422", None)
        if not path.startswith("/v1/"):
            operation["security"] = []  # liveness and readiness probes need no key
            continue
        statuses = [*COMMON_ERRORS, 401, 403] if settings.api_keys else list(COMMON_ERRORS)
        if "requestBody" in operation:
            statuses.append(413)
        for status in statuses:
            responses.setdefault(str(status), {"description": ERROR_DESCRIPTIONS[status], "content": _error_ref()})
        operation["responses"] = dict(sorted(responses.items()))
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    if settings.api_keys:
        components["securitySchemes"] = {
            BEARER: {"type": "http", "scheme": "bearer", "description": "One of the server's RESPONSES_API_KEYS."}
        }
        document["security"] = [{BEARER: []}]
    app.openapi_schema = document
    return document
