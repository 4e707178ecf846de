"""Request checks beyond the schema: what we do not run yet, model names, strict mode, the request body."""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.config import Settings
from app.errors import InvalidRequest, RequestTooLarge, validation_error
from app.model_registry.spec import ModelRegistry, ModelSpec
from app.schemas.requests import COUNT_FIELDS, KNOWN_FIELDS, NOT_IMPLEMENTED_FIELDS, CreateResponseRequest

Body = TypeVar("Body", bound=BaseModel)


#: Lone UTF-16 surrogates: JSON's \ud800 escapes decode to them, and no UTF-8 text (nor any database) holds them.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def request_too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(
        f"The request body is larger than this server's limit of {limit} bytes.", code="request_too_large"
    )


def parse_json_object(body: bytes | str, settings: Settings) -> dict[str, Any]:
    """The body as a JSON object, or a 400: within the size and nesting limits, and only text that every
    database can store (the one place where request text is checked, before anything is stored)."""
    if len(body) > settings.max_request_bytes:
        raise request_too_large(settings.max_request_bytes)
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidRequest(
            "We could not parse the JSON body of your request. The body must be a valid JSON object.",
            code="invalid_json",
        ) from None
    except RecursionError:  # nested deeper than the interpreter's own limit
        raise _too_deep(settings.max_json_depth, None) from None
    if not isinstance(payload, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    check_json_text(payload, settings.max_json_depth)
    return payload


def _too_deep(limit: int, param: str | None) -> InvalidRequest:
    return InvalidRequest(
        f"The request body nests objects and arrays more than {limit} levels deep.", param=param, code="invalid_json"
    )


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def check_json_text(value: Any, max_depth: int) -> None:
    """A 400 naming the first place where `value` nests deeper than `max_depth` or holds a lone surrogate (in a
    key or a string). Iterative: a deep document cannot exhaust the stack."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, str):
            if LONE_SURROGATE.search(node):
                raise _lone_surrogate(path)
            continue
        if not isinstance(node, dict | list):
            continue
        if depth >= max_depth:
            raise _too_deep(max_depth, path or None)
        if isinstance(node, list):
            stack.extend((child, _child(path, index), depth + 1) for index, child in enumerate(node))
            continue
        for key, child in node.items():
            if LONE_SURROGATE.search(key):
                raise _lone_surrogate(_child(path, key.encode("utf-8", "backslashreplace").decode()))
            stack.append((child, _child(path, key), depth + 1))


def _lone_surrogate(param: str) -> InvalidRequest:
    return InvalidRequest(
        f"Invalid value for '{param}': the text holds a lone UTF-16 surrogate (such as \\ud800), which is not "
        "valid Unicode.",
        param=param or None,
        code="invalid_value",
    )


def _reject_unknown(payload: dict[str, Any], known: Collection[str], settings: Settings) -> None:
    """Strict mode: a field not in `known` is a 400 naming it."""
    if settings.strict_params:
        unknown = sorted(set(payload) - set(known))
        if unknown:
            raise InvalidRequest(f"Unknown parameter: '{unknown[0]}'.", param=unknown[0], code="unknown_parameter")


def parse_payload(
    payload: dict[str, Any], model: type[Body], settings: Settings, *, known: Collection[str] | None = None
) -> Body:
    """A JSON object as `model`, or a 400 that names what is wrong (strict mode: fields not in `known`, by
    default the model's, too)."""
    _reject_unknown(payload, model.model_fields if known is None else known, settings)
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        raise validation_error(list(error.errors())) from None


def parse_body(body: bytes, model: type[Body], settings: Settings, *, known: Collection[str] | None = None) -> Body:
    """A JSON body as `model`, or a 400 that names what is wrong."""
    return parse_payload(parse_json_object(body, settings), model, settings, known=known)


def _check_sizes(payload: dict[str, Any], settings: Settings) -> None:
    """The limits on how many input items and tools a request may send, checked before any is parsed."""
    items = payload.get("input")
    if isinstance(items, list) and len(items) > settings.max_input_items:
        raise InvalidRequest(
            f"The input holds {len(items)} items; this server takes at most {settings.max_input_items}.",
            param="input",
            code="too_many_items",
        )
    tools = payload.get("tools")
    if not isinstance(tools, list):
        return
    members = [tool.get("tools") for tool in tools if isinstance(tool, dict)]
    count = len(tools) + sum(len(group) for group in members if isinstance(group, list))
    if count > settings.max_tools:
        raise InvalidRequest(
            f"The request sends {count} tools; this server takes at most {settings.max_tools}.",
            param="tools",
            code="too_many_tools",
        )
    for index, tool in enumerate(tools):
        size = len(json.dumps(tool, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        if size > settings.max_tool_bytes:
            raise InvalidRequest(
                f"Tool {index} is {size} bytes as JSON; this server takes tools of at most "
                f"{settings.max_tool_bytes} bytes.",
                param=f"tools[{index}]",
                code="tool_too_large",
            )


def parse_create_payload(payload: dict[str, Any], settings: Settings) -> CreateResponseRequest:
    """A create request's fields as a CreateResponseRequest, or a 400 that names what is wrong."""
    _check_sizes(payload, settings)
    request = parse_payload(payload, CreateResponseRequest, settings, known=KNOWN_FIELDS)
    check_supported(request)
    return request


def parse_create_request(body: bytes, settings: Settings) -> CreateResponseRequest:
    """The body of POST /v1/responses as a CreateResponseRequest, or a 400 that names what is wrong."""
    return parse_create_payload(parse_json_object(body, settings), settings)


def parse_count_request(body: bytes, settings: Settings) -> CreateResponseRequest:
    """The body of POST /v1/responses/input_tokens: the create fields that shape the prompt (input optional)."""
    payload = parse_json_object(body, settings)
    _reject_unknown(payload, COUNT_FIELDS, settings)
    if payload.get("personality") is not None:
        raise _not_supported("personality", "'personality'")
    shaping = {key: value for key, value in payload.items() if key in COUNT_FIELDS and key != "personality"}
    if shaping.get("input") is None:
        shaping["input"] = []
    return parse_create_payload(shaping, settings)


def _not_supported(param: str, what: str) -> InvalidRequest:
    return InvalidRequest(f"{what} is not supported by this server yet.", param=param, code="unsupported_parameter")


def check_supported(request: CreateResponseRequest) -> None:
    """400 for every parameter the API defines that we do not run yet: never silently ignored."""
    for field, off in NOT_IMPLEMENTED_FIELDS.items():
        value = getattr(request, field)
        if value is not None and value != off:
            raise _not_supported(field, f"'{field}'")


def resolve_model(requested: str | None, registry: ModelRegistry, settings: Settings) -> ModelSpec:
    """The served model a request names (by id or alias); none named: the default one."""
    if requested is None:
        return registry.default
    spec = registry.get(requested)
    if spec is not None:
        return spec
    if settings.map_unknown_models:
        return registry.default
    # The hosted Responses API's answer to an unknown model (a 400, where GET /v1/models/{id} is a 404).
    raise InvalidRequest(f"The requested model '{requested}' does not exist.", param="model", code="model_not_found")
