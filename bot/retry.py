"""The one retry policy: wait and try again while a service is away, within bounds.

Every wait-and-retry of the bot goes through :func:`retrying` (tenacity does
the bookkeeping): Redis outages (intake, the runner's reads and
acknowledgements, storing an answer), a model call that failed before any
text, Telegram 5xx and flood control, and start-up. Callers say which
failures are worth another try and when to give up (a number of attempts, a
total time, or a shutdown); the last failure is then raised as it was.
:class:`Outage` keeps the log to one line when a service goes away and one
when it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    stop_any,
    wait_exponential_jitter,
)

log = logging.getLogger("replychain.retry")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential waits: ``initial`` seconds, doubling, at most ``maximum``, plus jitter."""

    initial: float = 0.2
    maximum: float = 5.0
    jitter: float = 0.1


#: A service is away: try again soon at first, then every few seconds.
WHILE_AWAY = Backoff(0.2, 5.0, 0.1)


async def retrying(
    call: Callable[[], Awaitable[T]],
    *,
    on: tuple[type[BaseException], ...],
    when: Callable[[BaseException], bool] | None = None,
    backoff: Backoff = WHILE_AWAY,
    attempts: int | None = None,
    within: float | None = None,
    until: asyncio.Event | None = None,
    wait_hint: Callable[[BaseException], float | None] | None = None,
    on_retry: Callable[[BaseException], None] | None = None,
) -> T:
    """Await ``call()`` until it succeeds, retrying failures of the types ``on``.

    ``when`` narrows which of them are retried. Gives up, raising the last
    failure, after ``attempts`` tries, after ``within`` seconds, or once
    ``until`` is set (a wait in progress ends at once). ``wait_hint`` may name
    the wait a failure asks for (Telegram's ``retry_after``) instead of the
    backoff; ``on_retry`` hears of every failure that will be retried.
    """

    def retryable(exc: BaseException) -> bool:
        return isinstance(exc, on) and (when is None or when(exc))

    # The first try runs bare: on the hot path (a Redis write, a Telegram call) the
    # retry machinery costs more than the call, and it is needed only after a failure.
    try:
        return await call()
    except BaseException as exc:
        if not retryable(exc):
            raise
        first: BaseException | None = exc

    exponential = wait_exponential_jitter(
        multiplier=backoff.initial, max=backoff.maximum, jitter=backoff.jitter
    )

    def wait(state: RetryCallState) -> float:
        failure = state.outcome.exception() if state.outcome else None
        hint = wait_hint(failure) if wait_hint and failure else None
        return hint if hint is not None else exponential(state)

    def before_sleep(state: RetryCallState) -> None:
        failure = state.outcome.exception() if state.outcome else None
        if on_retry is not None and failure is not None:
            on_retry(failure)

    async def attempt() -> T:
        nonlocal first
        if first is not None:  # tenacity's first try is the one already made
            failure, first = first, None
            raise failure
        return await call()  # tenacity treats a plain function returning an awaitable as sync

    retryer = AsyncRetrying(
        retry=retry_if_exception(retryable),
        stop=_stops(attempts, within, until),
        wait=wait,
        sleep=partial(_sleep, until),
        before_sleep=before_sleep,
        reraise=True,
    )
    return await retryer(attempt)


def _stops(attempts: int | None, within: float | None, until: asyncio.Event | None) -> Any:
    stops: list[Any] = []
    if attempts is not None:
        stops.append(stop_after_attempt(attempts))
    if within is not None:
        stops.append(stop_after_delay(within))
    if until is not None:
        stops.append(lambda _state: until.is_set())
    return stop_any(*stops)


async def _sleep(until: asyncio.Event | None, seconds: float) -> None:
    """Wait ``seconds``, or less when ``until`` is set meanwhile."""
    if until is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(until.wait(), seconds)


async def cancel_until_done(task: asyncio.Task[Any], *, every: float = 0.5) -> None:
    """Cancel ``task`` and wait until it has ended; its own failure is raised.

    The cancel is repeated while the task runs on: Python 3.11's ``asyncio.wait_for``
    (which redis-py's ``send_packed_command`` uses on every command) returns the inner
    result and drops a cancellation that arrives as the inner call finishes (CPython
    issue #86296, fixed in 3.12), so one cancel can be lost and a single ``await
    task`` would wait forever.
    """
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=every)
    if not task.cancelled():
        task.result()


class Outage:
    """Logs one line when a service goes away and one when it is back, not one per failure.

    A call that fails once and gets through on its next try (a connection the
    service closed just before it was used: a restart a moment ago) is no outage:
    the first line is written when one call fails twice in a row. The service
    counts as away (:attr:`since`, for health and metrics) from the first failure.
    """

    def __init__(self, service: str, consequence: str) -> None:
        self.service = service
        self.consequence = consequence
        self.since: float | None = None
        #: Times the service went away (for metrics).
        self.count = 0
        self._logged = False

    def failed(self, exc: BaseException, *, again: bool = True) -> None:
        """A call failed (``again``: not for the first time in a row)."""
        if self.since is None:
            self.since = time.monotonic()
            self.count += 1
        if again and not self._logged:
            self._logged = True
            cause = exc.__cause__ or exc
            log.error(
                "%s is unreachable (%s); retrying with backoff. %s",
                self.service,
                type(cause).__name__,
                self.consequence,
            )

    def ok(self) -> None:
        if self.since is not None and self._logged:
            took = time.monotonic() - self.since
            log.warning("%s is reachable again after %.1fs; resuming", self.service, took)
        self.since = None
        self._logged = False

    def watcher(self) -> Callable[[BaseException], None]:
        """An ``on_retry`` for one call's retries: its second failure in a row counts."""
        failures = 0

        def failed(exc: BaseException) -> None:
            nonlocal failures
            failures += 1
            self.failed(exc, again=failures > 1)

        return failed

    async def guard(
        self,
        call: Callable[[], Awaitable[T]],
        *,
        on: tuple[type[BaseException], ...],
        until: asyncio.Event | None = None,
    ) -> T:
        """``call()`` retried while this service is away (forever, or until ``until``)."""
        result = await retrying(call, on=on, until=until, on_retry=self.watcher())
        self.ok()
        return result
