"""Live sessions on a WebSocket connection: its client events, the responses it runs, steering."""
