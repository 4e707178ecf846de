"""Protocol code, no I/O: the Response assembler, the events that close items, open items of a relayed stream, logprobs,
the terminal statuses and events, and the Response a stored row stands for."""
