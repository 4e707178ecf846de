"""The behaviour of the API: create, chain, retrieve, delete, list; routes call exactly one of these."""
