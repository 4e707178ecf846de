"""What every route shares: dependencies as Annotated aliases, error handlers, SSE framing, OpenAPI helpers, paging
parameters, request guards, and the documentation routes. Routes live in each domain's endpoints.py."""
