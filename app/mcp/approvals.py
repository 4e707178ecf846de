"""The mcp_approval_response items of a request, checked against the mcp_approval_requests of its context (a 400
naming the item otherwise), and the approved calls that its response makes before the model goes on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.errors import InvalidRequest


@dataclass(frozen=True, slots=True)
class ApprovedCall:
    """A call the client approved and that was not made yet."""

    approval_request_id: str
    server_label: str
    name: str
    arguments: str
    #: The request's field that approved it (input[i]), for a 400 about it.
    param: str

    def to_payload(self) -> dict[str, str]:
        return {
            "approval_request_id": self.approval_request_id,
            "server_label": self.server_label,
            "name": self.name,
            "arguments": self.arguments,
        }


def approved_calls(
    earlier: Sequence[dict[str, Any]],
    items: Sequence[dict[str, Any]],
    param: str = "input",
    *,
    pending_earlier: str | None = None,
) -> list[ApprovedCall]:
    """Every mcp_approval_response among `items` (a request's own, at `param[i]`) must answer an
    mcp_approval_request of the context (`earlier`, the history, or `items` themselves) that no other response
    answered. Returns the approved ones whose call is not in the context yet (a resent history carries the
    mcp_call an earlier turn made on its approval).

    `pending_earlier` (the field a 400 about them names): the approvals of `earlier` whose call was never made
    are returned too, first. A conversation's: an mcp_approval_response added with the conversation items API is
    honoured by the next response on the conversation (a response's own always has its mcp_call beside it, since
    a response that fails or is cancelled adds nothing to its conversation)."""
    context = [*earlier, *items]
    requests = {item["id"]: item for item in context if item.get("type") == "mcp_approval_request"}
    called = {item.get("approval_request_id") for item in context if item.get("type") == "mcp_call"}
    answered = {item["approval_request_id"] for item in earlier if item.get("type") == "mcp_approval_response"}
    approved: list[ApprovedCall] = []
    if pending_earlier is not None:
        for item in earlier:
            request = requests.get(item.get("approval_request_id", ""))
            if item.get("type") != "mcp_approval_response" or not item["approve"] or request is None:
                continue
            if request["id"] not in called:
                approved.append(_approved(request, pending_earlier))
    for index, item in enumerate(items):
        if item.get("type") != "mcp_approval_response":
            continue
        request_id = item["approval_request_id"]
        where = f"{param}[{index}].approval_request_id"
        request = requests.get(request_id)
        if request is None:
            raise InvalidRequest(
                f"No mcp_approval_request found with id '{request_id}'.", param=where, code="invalid_value"
            )
        if request_id in answered:
            raise InvalidRequest(
                f"The mcp_approval_request '{request_id}' was already answered.", param=where, code="invalid_value"
            )
        answered.add(request_id)
        if item["approve"] and request_id not in called:
            approved.append(_approved(request, f"{param}[{index}]"))
    return approved


def _approved(request: dict[str, Any], param: str) -> ApprovedCall:
    return ApprovedCall(request["id"], request["server_label"], request["name"], request["arguments"], param)
