"""Conversations on the wire, named and shaped as the openai SDK's `openai.types.conversations`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.schemas.items import InputItem, ItemList
from app.schemas.metadata import check_metadata

#: The most items one create (of a conversation, or of items in one) may carry.
MAX_ITEMS_PER_CALL = 20


class ConversationCreateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    items: list[InputItem] | None = Field(None, max_length=MAX_ITEMS_PER_CALL)
    metadata: dict[str, str] | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata_bounds(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_metadata(value)


class ConversationUpdateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    # Required, though it may be null (which clears it), as in the SDK's ConversationUpdateParams.
    metadata: dict[str, str] | None

    @field_validator("metadata")
    @classmethod
    def _metadata_bounds(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_metadata(value)


class ItemsCreateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    items: list[InputItem] = Field(min_length=1, max_length=MAX_ITEMS_PER_CALL)


class ConversationObject(BaseModel):
    id: str
    object: Literal["conversation"] = "conversation"
    created_at: int
    metadata: dict[str, str] = Field(default_factory=dict)


class DeletedConversation(BaseModel):
    id: str
    object: Literal["conversation.deleted"] = "conversation.deleted"
    deleted: bool = True


class ConversationItemList(ItemList):
    """GET /v1/conversations/{id}/items."""
