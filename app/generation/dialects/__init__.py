"""Model families' output syntaxes (dialects): how each writes reasoning, text and tool calls, read incrementally."""
