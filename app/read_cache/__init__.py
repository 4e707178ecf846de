"""A per-process cache of finished responses' JSON, each entry valid only while its stored version is unchanged."""
