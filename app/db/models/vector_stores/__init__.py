"""The vector stores' tables: the stores, the files attached to them, their file batches and the chunks searched."""
