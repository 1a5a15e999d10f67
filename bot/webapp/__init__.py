"""The thread viewer: a Telegram Mini App drawing a whole conversation tree.

The bot serves it itself (``WEBAPP_URL``, ``WEBAPP_LISTEN``): a static page
(``static/``: no build step, no script from anywhere but Telegram's own
``telegram-web-app.js``, which the page does without) and a small JSON API.

* :mod:`.auth`: who is asking (the Mini App's signed ``initData``) and which
  chats they may read;
* :mod:`.view`: a conversation tree as JSON: the skeleton first (one short line
  per node), full texts on demand;
* :mod:`.server`: the aiohttp routes, headers and the server's lifecycle;
* :mod:`.texts`: every text the viewer and its button show, in one table.
"""
