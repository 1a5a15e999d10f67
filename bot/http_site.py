"""Serving an aiohttp application on an address: the webhook, the metrics server and the
viewer's own."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web


async def open_site(
    app: web.Application,
    host: str,
    port: int,
    *,
    shutdown_timeout: float,
    handler_cancellation: bool = False,
) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host``:``port``: its runner, and the port bound (the one given,
    or the one picked for 0). OSError when the address cannot be bound (nothing is left
    running then). ``handler_cancellation``: aiohttp's option of that name (a handler is
    cancelled when its client goes away)."""
    # imported here: aiohttp.web costs start-up time only when a server is on
    from aiohttp import web  # noqa: PLC0415

    runner = web.AppRunner(
        app,
        access_log=None,
        handler_cancellation=handler_cancellation,
        shutdown_timeout=shutdown_timeout,
    )
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, int(runner.addresses[0][1])
