"""POST /v1/embeddings: the declared embedding models, run where generation runs (this process, or a model's
workers), in OpenAI's shape."""
