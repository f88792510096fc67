"""`shoal serve` and `shoal mcp`: a browser app, a REST API and an MCP server over a folder
of runs (docs/web.md)."""
