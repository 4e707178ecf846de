"""Quotas per tenant: the bytes each keeps stored, measured and charged, and the 429 for a write past its limit."""
