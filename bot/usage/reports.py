"""/usage and /stats: token reports, as plain text with the provider's numbers."""

from __future__ import annotations

import asyncio

from transcript import TranscriptStore

from .. import choice_texts
from . import chart
from .accounting import Accounting, Prices, Totals, next_reset

OWNER_ONLY_TEXT = "/stats is only for the bot's owner (OWNER_USER_IDS)."


def _n(value: int) -> str:
    return f"{value:,}"


def _line(label: str, totals: Totals, accounting: Accounting, *, costed: bool = True) -> str:
    """One line of totals; ``costed``: ``totals.cost`` holds what they cost."""
    text = (
        f"{label}: {_n(totals.tokens)} tokens in {_n(totals.calls)} model call"
        f"{'' if totals.calls == 1 else 's'} (prompt {_n(totals.prompt)}, of which cached "
        f"{_n(totals.cached)}; completion {_n(totals.completion)})"
    )
    if totals.estimated:
        text += f"; {totals.estimated} call(s) estimated: the provider reported no usage"
    if accounting.priced and costed:
        text += f"; about ${totals.dollars:.4f}"
    return text


def _per_model(totals: Totals, accounting: Accounting) -> list[str]:
    """A line per model (kept with several models): tokens, calls and cost."""
    lines = []
    for name, used in totals.models.items():
        cost = (
            f"about ${used.dollars:.4f}"
            if accounting.prices_of(name).configured
            else f"tokens only: {choice_texts.NO_PRICES}"
        )
        lines.append(
            f"  {name}: {_n(used.tokens)} tokens in {_n(used.calls)} call"
            f"{'' if used.calls == 1 else 's'}, {cost}"
        )
    return lines


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
    lines = ["Your usage:", _line("Today (UTC)", today, accounting), *_per_model(today, accounting)]
    if daily_limit:
        now = accounting.clock()
        left = max(0, daily_limit - today.tokens)
        lines.append(
            f"Daily limit: {_n(daily_limit)} tokens, {_n(left)} left; resets at "
            f"{next_reset(now).strftime('%H:%M')} UTC"
        )
    all_time = await accounting.user_all_time(user_id)
    lines += [_line("All time", all_time, accounting), *_per_model(all_time, accounting)]
    if replied_to is not None:
        node = await store.resolve(str(chat_id), replied_to)
        if node is not None:
            path = [n.id for n in await store.path(node)]
            chain = await accounting.chain(chat_id, path)
            costed = accounting.uniform_prices is not None  # (per node, not per model)
            lines.append(_line("This conversation (this branch)", chain, accounting, costed=costed))
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
    total = sum((t for _, t in per_day), Totals())
    if accounting.priced:
        lines.append(f"Estimated cost of the days above: ${total.dollars:.4f}")
    if total.models:
        lines += ["By model (the days above):", *_per_model(total, accounting)]
    return "\n".join(lines)


async def stats_chart(accounting: Accounting) -> tuple[bytes, str]:
    """The /stats chart (PNG) and its caption: tokens per day over the last 30 days
    and the top users; with prices set, the estimated cost."""
    per_user, per_day = await accounting.stats(days=chart.DAYS, users=chart.TOP_USERS)
    top = [(user, all_time) for user, all_time, _today in per_user]
    # the chart prices tokens itself: only while every model costs alike
    prices = accounting.uniform_prices or Prices()
    png = await asyncio.to_thread(chart.render, per_day, top, prices)
    total = sum((totals for _, totals in per_day), Totals())
    caption = f"Tokens per day over the last {chart.DAYS} days (UTC) and the top users"
    if accounting.priced:
        caption += f"; estimated cost of these days: ${total.dollars:.4f}"
    return png, caption
