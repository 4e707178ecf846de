"""Request checks beyond the schema: what we do not run yet, model names, strict mode, the request body."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import TypeVar, get_args

from pydantic import BaseModel, ValidationError

from app.config import Settings
from app.errors import InvalidRequest, validation_error
from app.schemas.requests import KNOWN_FIELDS, NOT_IMPLEMENTED_FIELDS, CreateResponseRequest, Includable

Body = TypeVar("Body", bound=BaseModel)
INCLUDABLE = frozenset(get_args(Includable))


def parse_body(body: bytes, model: type[Body], settings: Settings, *, known: Collection[str] | None = None) -> Body:
    """A JSON body as `model`, or a 400 that names what is wrong (strict mode: fields not in `known`, by default
    the model's, too)."""
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidRequest(
            "We could not parse the JSON body of your request. The body must be a valid JSON object.",
            code="invalid_json",
        ) from None
    if not isinstance(payload, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    if settings.strict_params:
        unknown = sorted(set(payload) - set(model.model_fields if known is None else known))
        if unknown:
            raise InvalidRequest(f"Unknown parameter: '{unknown[0]}'.", param=unknown[0], code="unknown_parameter")
    try:
        return model.model_validate(payload)
    except ValidationError as error:
        raise validation_error(list(error.errors())) from None


def parse_create_request(body: bytes, settings: Settings) -> CreateResponseRequest:
    """The body as a CreateResponseRequest, or a 400 that names what is wrong."""
    request = parse_body(body, CreateResponseRequest, settings, known=KNOWN_FIELDS)
    check_supported(request)
    return request


def check_includes(*includes: list[str] | None) -> None:
    """`include` values (sent as include= or include[]=) must be ones the API defines."""
    for values in includes:
        for value in values or []:
            if value not in INCLUDABLE:
                raise InvalidRequest(
                    f"Invalid value for 'include': '{value}' is not one of {sorted(INCLUDABLE)}.",
                    param="include",
                    code="invalid_value",
                )


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
