"""Lifecycle: run the bot, take updates, shut down gracefully.

:class:`App` is the parts (:mod:`bot.app_parts`) and their start-up
(:mod:`bot.app_startup`), run: on SIGTERM or SIGINT the bot stops taking updates, gives
in-flight answers ``SHUTDOWN_TIMEOUT`` seconds to finish, closes its connections and
exits 0: whatever is in flight, shutdown never takes much longer than that.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

from .app_startup import Startup
from .model import estimate_text
from .model.client import load_sdk
from .retry import cancel_until_done
from .settings import Settings

log = logging.getLogger("replychain")


class App(Startup):
    """Every long-lived part of a running bot."""

    async def run(self, *, install_signals: bool = True) -> int:
        loop = asyncio.get_running_loop()
        if install_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop, sig.name)
        relaying: asyncio.Task[None] | None = None
        setting_up: asyncio.Task[None] | None = None
        loading: asyncio.Task[None] | None = None
        sweeping: asyncio.Task[None] | None = None
        try:
            await self._serve_metrics()
            await self._serve_viewer()
            await self.check()
            if self.webhook is None:
                # beside polling, never before it: neither call is needed to take updates
                setting_up = asyncio.create_task(self._prepare_polling(), name="set-up")
            else:
                await self._prepare_webhook(self.webhook)
            receiving = asyncio.create_task(self._receive())
            # the model SDK's import, off the event loop, once updates are being taken in
            loading = asyncio.create_task(asyncio.to_thread(_settle), name="load-sdk")
            if self.tools is not None:
                # updates are taken in meanwhile; turns wait for the tools (a server that
                # fails is logged and skipped)
                await self.tools.start()
                if self.tools.spec_bytes:
                    self.context.reserve(estimate_text(self.tools.spec_bytes.decode()))
            self.runner.start()
            relaying = asyncio.create_task(self.stops.run(self.stopping), name="stop-relay")
            if self.sweep is not None:
                sweeping = asyncio.create_task(self.sweep.run(self.stopping), name="cold-sweep")
            stop = asyncio.create_task(self.stopping.wait())
            done, _ = await asyncio.wait({receiving, stop}, return_when=asyncio.FIRST_COMPLETED)
            if receiving in done:
                stop.cancel()
                receiving.result()  # polling ended on its own: surface why
            await receiving
            await self.runner.drain(self.settings.shutdown_timeout)
            await self.notifier.drain(1.0)
            log.info("stopped cleanly")
            return 0
        finally:
            if install_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            for task in (relaying, setting_up, loading, sweeping):
                if task is not None:
                    await cancel_until_done(task)
            await self.close()

    async def _receive(self) -> None:
        """Take updates until stopping: serve the webhook, or poll when this process may."""
        if self.webhook is None:
            await self.poller.run(self.stopping)
            return
        try:
            await self.stopping.wait()
        finally:
            await self.webhook.stop()

    def stop(self, reason: str = "stop") -> None:
        """Begin a graceful shutdown (what SIGTERM does)."""
        log.info("%s: finishing answers in flight, taking no new messages", reason)
        self.stopping.set()

    async def close(self) -> None:
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        if self.viewer is not None:
            await self.viewer.stop()
        if self.tools is not None:
            await self.tools.close()
        if self.webhook is not None:
            await self.webhook.stop()
        await self.bot.session.close()
        await self.models.close()
        await self.transcriber.close()
        await self.redis.aclose()


def _settle() -> None:
    """Import the model SDK, then keep what start-up built out of the collector's sight.

    The imports leave hundreds of thousands of objects the collector tracks, which live
    as long as the process; every full collection walked them all (``python -m bench
    process`` shows the cost per turn). ``gc.freeze`` moves them to a generation the
    collector skips; objects made later are collected as before.
    """
    load_sdk()
    gc.freeze()


async def run(settings: Settings) -> int:
    return await App(settings).run()
