"""Tools for the model: MCP servers the owner configures, and the per-node tool loop.

:mod:`.config` reads ``MCP_CONFIG`` (light: the settings check imports it),
:mod:`.hub` holds the connections to the servers (the ``mcp`` SDK), :mod:`.loop`
runs the tool rounds of one turn and persists each step, :mod:`.retention`
shapes tool results in the view the model is sent.
"""
