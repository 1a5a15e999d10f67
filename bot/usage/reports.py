"""/usage and /stats: token reports, as plain text with the provider's numbers, in the
asker's language (numbers and dates written its way, with Babel)."""

from __future__ import annotations

import asyncio
from datetime import date

from transcript import TranscriptStore

from .. import choice_texts
from ..i18n import N_, _, day, dollars, ngettext, number
from . import chart
from .accounting import Accounting
from .calls import Prices, Totals, resets_at

OWNER_ONLY_TEXT = N_("/stats is only for the bot's owner (OWNER_USER_IDS).")


def _tokens(count: int) -> str:
    return ngettext("{count} token", "{count} tokens", count).format(count=number(count))


def _calls(count: int) -> str:
    return ngettext("{count} call", "{count} calls", count).format(count=number(count))


def _line(label: str, totals: Totals, accounting: Accounting, *, costed: bool = True) -> str:
    """One line of totals; ``costed``: ``totals.cost`` holds what they cost."""
    text = _(
        "{label}: {tokens} in {calls} (prompt {prompt}, of which cached {cached}; "
        "completion {completion})"
    ).format(
        label=label,
        tokens=_tokens(totals.tokens),
        calls=ngettext("{count} model call", "{count} model calls", totals.calls).format(
            count=number(totals.calls)
        ),
        prompt=number(totals.prompt),
        cached=number(totals.cached),
        completion=number(totals.completion),
    )
    if totals.estimated:
        text += "; " + ngettext(
            "{count} call estimated: the provider reported no usage",
            "{count} calls estimated: the provider reported no usage",
            totals.estimated,
        ).format(count=number(totals.estimated))
    if accounting.priced and costed:
        text += "; " + _("about {cost}").format(cost=dollars(totals.dollars))
    return text


def _per_model(totals: Totals, accounting: Accounting) -> list[str]:
    """A line per model (kept with several models): tokens, calls and cost."""
    lines = []
    for name, used in totals.models.items():
        cost = (
            _("about {cost}").format(cost=dollars(used.dollars))
            if accounting.prices_of(name).configured
            else _("tokens only: {why}").format(why=_(choice_texts.NO_PRICES))
        )
        line = _("{tokens} in {calls}, {cost}").format(
            tokens=_tokens(used.tokens), calls=_calls(used.calls), cost=cost
        )
        lines.append(f"  {name}: {line}")
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
    """A user's tokens today and all time, and the chain of the message replied to, if
    any, in the current language."""
    today = await accounting.user_today(user_id)
    lines = [
        _("Your usage:"), _line(_("Today (UTC)"), today, accounting),
        *_per_model(today, accounting),
    ]  # fmt: skip
    if daily_limit:
        now = accounting.clock()
        left = max(0, daily_limit - today.tokens)
        lines.append(
            _("Daily limit: {limit}, {left} left; resets at {time} UTC").format(
                limit=_tokens(daily_limit), left=number(left), time=resets_at(now)
            )
        )
    all_time = await accounting.user_all_time(user_id)
    lines += [_line(_("All time"), all_time, accounting), *_per_model(all_time, accounting)]
    if replied_to is not None:
        node = await store.resolve(str(chat_id), replied_to)
        if node is not None:
            path = [n.id for n in await store.path(node)]
            chain = await accounting.chain(chat_id, path)
            costed = accounting.uniform_prices is not None  # (per node, not per model)
            label = _("This conversation (this branch)")
            lines.append(_line(label, chain, accounting, costed=costed))
    return "\n".join(lines)


async def stats_report(accounting: Accounting) -> str:
    """Totals per user and per day, for the owner, in the current language."""
    per_user, per_day = await accounting.stats()
    lines = [_("Usage by user (all time / today, tokens):")]
    if not per_user:
        lines.append("  " + _("none yet"))
    for user, all_time, today in per_user:
        lines.append(
            f"  {user}: {number(all_time.tokens)} / {number(today.tokens)} "
            f"({_calls(all_time.calls)})"
        )
    lines.append(_("Usage by day (UTC, tokens):"))
    for key, totals in per_day:
        if totals.calls:
            lines.append(f"  {day(_date(key))}: {number(totals.tokens)} ({_calls(totals.calls)})")
    total = sum((t for _key, t in per_day), Totals())
    if accounting.priced:
        lines.append(
            _("Estimated cost of the days above: {cost}").format(cost=dollars(total.dollars))
        )
    if total.models:
        lines += [_("By model (the days above):"), *_per_model(total, accounting)]
    return "\n".join(lines)


def _date(key: str) -> date:
    """The day of a stats key (``20261126``)."""
    return date(int(key[:4]), int(key[4:6]), int(key[6:]))


async def stats_chart(accounting: Accounting) -> tuple[bytes, str]:
    """The /stats chart (PNG) and its caption, in the current language: tokens per day
    over the last 30 days and the top users; with prices set, the estimated cost."""
    per_user, per_day = await accounting.stats(days=chart.DAYS, users=chart.TOP_USERS)
    top = [(user, all_time) for user, all_time, _today in per_user]
    # the chart prices tokens itself: only while every model costs alike
    prices = accounting.uniform_prices or Prices()
    png = await asyncio.to_thread(chart.render, per_day, top, prices)
    total = sum((totals for _key, totals in per_day), Totals())
    caption = _("Tokens per day over the last {days} days (UTC) and the top users").format(
        days=number(chart.DAYS)
    )
    if accounting.priced:
        caption += "; " + _("estimated cost of these days: {cost}").format(
            cost=dollars(total.dollars)
        )
    return png, caption
