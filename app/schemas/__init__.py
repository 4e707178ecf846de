"""Wire schemas: pydantic models named and shaped as the openai SDK's types; no storage imports."""
