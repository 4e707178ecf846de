"""Retrieval without an extra service: files' text extracted and chunked, indexed in the deployment's own database
(full-text, and embeddings when a model is configured), and searched; the vector stores API and the file_search
tool both use it."""
