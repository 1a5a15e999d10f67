"""The chat handlers: what the bot does with each update it takes in.

Routers, commands and their menus, the viewer's button, and the two ways updates
arrive (long polling, the webhook). Everything a turn needs of Telegram is the I/O
layer below (:mod:`bot.telegram`); a handler answers a command itself or hands the
message to the durable intake (:mod:`bot.bus`), never to the turn directly.
"""
