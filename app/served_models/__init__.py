"""GET /v1/models: the models this deployment serves, with what can run each now."""
