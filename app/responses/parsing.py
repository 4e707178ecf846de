"""The create request's parsing beyond the schema: the bounds on input items and tools, what we do not run yet, and
the input token count's subset of create's fields."""

from __future__ import annotations

import json
from typing import Any

from app.config import Settings
from app.errors import InvalidRequest
from app.responses.schemas import COUNT_FIELDS, KNOWN_FIELDS, NOT_IMPLEMENTED_FIELDS, CreateResponseRequest
from app.schemas.parsing import parse_json_object, parse_payload, reject_unknown


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
    reject_unknown(payload, COUNT_FIELDS, settings)
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
