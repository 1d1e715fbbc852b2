"""Front ends: `memd mcp` (an MCP server for agent hosts) and `memd hook` (their lifecycle hooks).

Both are stateless clients of the running daemon over its socket, with the caller's own credentials: the daemon
stays the single writer, and a front end never opens a memory file. What they send and show derives from the
method declarations (memd.methods). Imports memd.async_client, memd.client, memd.methods, memd.declare,
memd.textfmt and memd.errors (and the `mcp` SDK, in mcp_server only).
"""
