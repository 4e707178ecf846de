"""The error body every failed request answers with (OpenAI's shape), for the OpenAPI document."""

from __future__ import annotations

from pydantic import BaseModel


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(BaseModel):
    error: ErrorDetail
