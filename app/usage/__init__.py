"""Usage per tenant, model and UTC day: counted at each response's end, read through GET /v1/usage."""
