"""Why a hosted tool's call failed: the message its item's failure carries, and the model reads."""

from __future__ import annotations


class HostedCallFailed(Exception):
    pass
