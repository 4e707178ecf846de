"""Wire schemas shared across domains: pydantic models named and shaped as the openai SDK's types (items, the
Response, events, tools, paging), and request-body parsing; no storage or HTTP imports."""
