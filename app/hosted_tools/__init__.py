"""The hosted tools this server runs for the model: file_search over the caller's vector stores, web_search through
the backend its operator configures (a SearXNG-compatible endpoint, or an offline index)."""
