"""The journal contract of docs/contract.md in code, shared by every capture point and every reader.

Modules: canonical (RFC 8785), entry (the fourteen keys), chain, writer (durable appends),
reader, verify, seal, redact, bodies (encoding and spilling), blobstore, vault (layout and
session file names), record (the API capture points call), connectors (which connector a call
belongs to and its effect), replay (views and revert plans). Nothing here imports mitmproxy,
MCP or click.
"""
