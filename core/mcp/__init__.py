"""`pilothouse mcp`: a stdio MCP server through which the operator's own agent (Claude Code, Codex,
OpenCode) drives jobs, and the read-only profile a worker gets (`--worker`).

`server.py` builds the server and turns every failure into one line the model can act on; each
other module registers one group of tools (`jobs`, `planning`, `problems`, `events`) or the
worker's read-only view (`worker`). Every tool is a thin call into the same functions the CLI
commands call. Only `pilothouse mcp` imports this package: the MCP SDK costs the rest of the CLI
nothing.
"""
