"""The Vector Stores API: stores, their files and file batches, and search (on app/retrieval)."""
