"""Stand-ins for the services the bot talks to, served over real HTTP on loopback.

- ``telegram``: the Bot API server (``FakeTelegram``), split by concern: ``telegram_core``
  (state, HTTP plumbing, faults, getUpdates), ``telegram_setup`` (webhooks, command
  menus), ``telegram_messages``,
  ``telegram_files``, ``telegram_guest``, ``telegram_payments``, ``telegram_markup``
  (HTML and Markdown parsing) and ``telegram_types`` (records and the Bot API's rules);
  ``rich_messages`` checks rich messages.
- ``model``: the OpenAI-compatible model server (``FakeOpenAI``), split the same way:
  ``model_core`` (state, faults, chat completions), ``model_media`` (transcriptions,
  speech, pictures), ``model_rules`` (what a request must be) and ``model_types``
  (records, errors, token counting); ``stub_model``: a model object for tests that need
  no server.
- ``web``: pages and a SearXNG for the reading tests; ``mcp_server``: an MCP tool server.
"""
