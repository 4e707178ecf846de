"""HTTP layer: thin routes that parse, call one service function and reply."""
