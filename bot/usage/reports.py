"""/usage and /stats: token reports, as plain text with the provider's numbers."""

from __future__ import annotations

import asyncio

from transcript import TranscriptStore

from . import chart
from .accounting import Accounting, Totals, next_reset

OWNER_ONLY_TEXT = "/stats is only for the bot's owner (OWNER_USER_IDS)."


def _n(value: int) -> str:
    return f"{value:,}"


def _line(label: str, totals: Totals, accounting: Accounting) -> str:
    text = (
        f"{label}: {_n(totals.tokens)} tokens in {_n(totals.calls)} model call"
        f"{'' if totals.calls == 1 else 's'} (prompt {_n(totals.prompt)}, of which cached "
        f"{_n(totals.cached)}; completion {_n(totals.completion)})"
    )
    if totals.estimated:
        text += f"; {totals.estimated} call(s) estimated: the provider reported no usage"
    if accounting.prices.configured:
        text += f"; about ${accounting.prices.cost(totals):.4f}"
    return text


async def usage_report(
    accounting: Accounting,
    store: TranscriptStore,
    *,
    chat_id: int,
    user_id: int,
    replied_to: int | None,
    daily_limit: int,
) -> str:
    """A user's tokens today and all time, and the chain of the message replied to, if any."""
    today = await accounting.user_today(user_id)
    lines = ["Your usage:", _line("Today (UTC)", today, accounting)]
    if daily_limit:
        now = accounting.clock()
        left = max(0, daily_limit - today.tokens)
        lines.append(
            f"Daily limit: {_n(daily_limit)} tokens, {_n(left)} left; resets at "
            f"{next_reset(now).strftime('%H:%M')} UTC"
        )
    lines.append(_line("All time", await accounting.user_all_time(user_id), accounting))
    if replied_to is not None:
        node = await store.resolve(str(chat_id), replied_to)
        if node is not None:
            path = [n.id for n in await store.path(node)]
            chain = await accounting.chain(chat_id, path)
            lines.append(_line("This conversation (this branch)", chain, accounting))
    return "\n".join(lines)


async def stats_report(accounting: Accounting) -> str:
    """Totals per user and per day, for the owner."""
    per_user, per_day = await accounting.stats()
    lines = ["Usage by user (all time / today, tokens):"]
    if not per_user:
        lines.append("  none yet")
    for user, all_time, today in per_user:
        lines.append(
            f"  {user}: {_n(all_time.tokens)} / {_n(today.tokens)} ({_n(all_time.calls)} calls)"
        )
    lines.append("Usage by day (UTC, tokens):")
    for day, totals in per_day:
        if totals.calls:
            lines.append(
                f"  {day[:4]}-{day[4:6]}-{day[6:]}: {_n(totals.tokens)} ({_n(totals.calls)} calls)"
            )
    if accounting.prices.configured:
        total = sum((t for _, t in per_day), Totals())
        lines.append(f"Estimated cost of the days above: ${accounting.prices.cost(total):.4f}")
    return "\n".join(lines)


async def stats_chart(accounting: Accounting) -> tuple[bytes, str]:
    """The /stats chart (PNG) and its caption: tokens per day over the last 30 days
    and the top users; with prices set, the estimated cost."""
    per_user, per_day = await accounting.stats(days=chart.DAYS, users=chart.TOP_USERS)
    top = [(user, all_time) for user, all_time, _today in per_user]
    png = await asyncio.to_thread(chart.render, per_day, top, accounting.prices)
    total = sum((totals for _, totals in per_day), Totals())
    caption = f"Tokens per day over the last {chart.DAYS} days (UTC) and the top users"
    if accounting.prices.configured:
        caption += f"; estimated cost of these days: ${accounting.prices.cost(total):.4f}"
    return png, caption
