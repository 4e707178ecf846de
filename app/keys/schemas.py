"""API keys on the wire (GET/POST /v1/keys, DELETE /v1/keys/{id}): shaped after the openai SDK's admin API keys
(`redacted_value`, and `value` only in the answer to a create)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.tenants.identity import Role

#: The longest project or key name.
MAX_NAME_CHARS = 128


def _a_name(value: str) -> str:
    """A name without surrounding spaces, not empty, without control characters."""
    value = value.strip()
    if not value:
        raise ValueError("must not be empty")
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise ValueError("must not hold control characters")
    return value


class ApiKeyCreateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: The project's name; the project is created if it does not exist.
    project: str = Field(max_length=MAX_NAME_CHARS)
    name: str = Field(max_length=MAX_NAME_CHARS)
    role: Role = "member"

    @field_validator("project", "name")
    @classmethod
    def _names(cls, value: str) -> str:
        return _a_name(value)


class ApiKey(BaseModel):
    object: Literal["api_key"] = "api_key"
    id: str
    name: str
    role: Role
    #: The project's name, and its id (the tenant its keys share is "project:" + this id).
    project: str
    project_id: str
    #: The key's first and last characters: enough to recognise it, never to use it.
    redacted_value: str
    created_at: int
    last_used_at: int | None = None
    revoked_at: int | None = None


class CreatedApiKey(ApiKey):
    #: The key itself: in this answer only. The server keeps its hash.
    value: str


class ApiKeyList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ApiKey]
