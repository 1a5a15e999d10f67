"""The Telegram edge: the HTTP session, flood control, sending, streaming, routers."""
