"""Embedding models: their declarations, llama.cpp in embedding mode, and where embeddings are computed."""
