"""item_reference inputs -> the stored items they name (an input or output item of a stored response, or a
conversation item, of the same tenant)."""

from __future__ import annotations

from typing import Any

from app.db.session import Database
from app.errors import InvalidRequest
from app.items import repository


async def resolve_references(database: Database, items: list[dict[str, Any]], tenant: str, *, param: str) -> None:
    """Replace each item_reference in `items` with the item it names, in place; 400 naming `param[i].id` for
    an id this tenant holds nowhere (unknown, deleted, or another tenant's)."""
    wanted = {item["id"] for item in items if item.get("type") == "item_reference"}
    if not wanted:
        return
    async with database.read() as session:
        found = await repository.find_items(session, wanted, tenant)
    for index, item in enumerate(items):
        if item.get("type") != "item_reference":
            continue
        stored = found.get(item["id"])
        if stored is None:
            raise InvalidRequest(
                f"Item with id '{item['id']}' not found.", param=f"{param}[{index}].id", code="item_not_found"
            )
        items[index] = stored
