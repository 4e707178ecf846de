"""Request checks beyond the schema: what we do not run yet, model names, strict mode, the request body."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.config import Settings
from app.errors import InvalidRequest, validation_error
from app.schemas.requests import COUNT_FIELDS, KNOWN_FIELDS, NOT_IMPLEMENTED_FIELDS, CreateResponseRequest

Body = TypeVar("Body", bound=BaseModel)


def parse_json_object(body: bytes | str) -> dict[str, Any]:
    """The body as a JSON object, or a 400."""
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidRequest(
            "We could not parse the JSON body of your request. The body must be a valid JSON object.",
            code="invalid_json",
        ) from None
    if not isinstance(payload, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    return payload


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
    return parse_payload(parse_json_object(body), model, settings, known=known)


def parse_create_payload(payload: dict[str, Any], settings: Settings) -> CreateResponseRequest:
    """A create request's fields as a CreateResponseRequest, or a 400 that names what is wrong."""
    request = parse_payload(payload, CreateResponseRequest, settings, known=KNOWN_FIELDS)
    check_supported(request)
    return request


def parse_create_request(body: bytes, settings: Settings) -> CreateResponseRequest:
    """The body of POST /v1/responses as a CreateResponseRequest, or a 400 that names what is wrong."""
    return parse_create_payload(parse_json_object(body), settings)


def parse_count_request(body: bytes, settings: Settings) -> CreateResponseRequest:
    """The body of POST /v1/responses/input_tokens: the create fields that shape the prompt (input optional)."""
    payload = parse_json_object(body)
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


def resolve_model(requested: str | None, settings: Settings, served: str) -> str:
    if requested is None or requested == served or settings.map_unknown_models:
        return served
    raise InvalidRequest(
        f"The model '{requested}' does not exist on this server; it serves '{served}'.",
        param="model",
        code="model_not_found",
    )
