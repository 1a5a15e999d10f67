"""Tools for the model: MCP servers the owner configures.

:mod:`.config` reads ``MCP_CONFIG`` (light: the settings check imports it),
:mod:`.hub` holds the connections to the servers (the ``mcp`` SDK), :mod:`.retention`
shapes tool results in the view the model is sent. The tool rounds of a turn, each
step persisted, are the turn's own (:mod:`bot.turn.tools`).
"""
