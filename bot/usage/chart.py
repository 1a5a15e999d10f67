"""The /stats chart: tokens per day and the top users, as a PNG (matplotlib, Agg).

:func:`render` is plain CPU work (about half a second, a second or two the first
time, when matplotlib is imported): callers run it off the event loop
(``asyncio.to_thread``). It draws on a :class:`~matplotlib.figure.Figure` of
its own with the Agg canvas, never pyplot, so no display is needed; renders
are serialised, since matplotlib's font and text caches are not thread-safe.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .calls import Prices, Totals

if TYPE_CHECKING:
    from matplotlib.ticker import Formatter

#: Days shown, and users.
DAYS = 30
TOP_USERS = 10
#: Uncached prompt, cached prompt, completion: the stack of every bar.
_KINDS = ("prompt (uncached)", "prompt (cached)", "completion")
_COLOURS = ("#4878d0", "#6acc64", "#ee854a")
_SIZE_INCHES = (11.0, 4.8)
_DPI = 100
_ONE_AT_A_TIME = threading.Lock()


def _stack(totals: Totals) -> tuple[int, int, int]:
    return max(0, totals.prompt - totals.cached), totals.cached, totals.completion


def render(
    per_day: Sequence[tuple[str, Totals]],
    per_user: Sequence[tuple[int, Totals]],
    prices: Prices,
) -> bytes:
    """The chart as PNG bytes.

    ``per_day``: (``YYYYMMDD``, totals), any order; ``per_user``: (user id, all-time
    totals), largest first. Users are shown by id: the bot keeps no names.
    """
    with _ONE_AT_A_TIME:
        return _draw(per_day, per_user, prices)


def _draw(
    per_day: Sequence[tuple[str, Totals]],
    per_user: Sequence[tuple[int, Totals]],
    prices: Prices,
) -> bytes:
    from matplotlib.figure import Figure  # noqa: PLC0415 (heavy: only when drawn)

    days = sorted(per_day)
    figure = Figure(figsize=_SIZE_INCHES, dpi=_DPI, layout="constrained")
    by_day, by_user = figure.subplots(1, 2, width_ratios=(2.2, 1))

    labels = [f"{day[4:6]}-{day[6:]}" for day, _ in days]
    bottom = [0] * len(days)
    stacks = [_stack(totals) for _, totals in days]
    for k, (kind, colour) in enumerate(zip(_KINDS, _COLOURS, strict=True)):
        heights = [stack[k] for stack in stacks]
        by_day.bar(range(len(days)), heights, bottom=bottom, color=colour, label=kind, width=0.8)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    step = max(1, len(days) // 10)
    by_day.set_xticks(range(0, len(days), step), labels[::step], rotation=45, ha="right")
    by_day.set_title(f"Tokens per day (UTC), last {len(days)} days")
    by_day.set_ylabel("tokens")
    by_day.legend(loc="upper left", fontsize="small")
    by_day.yaxis.set_major_formatter(_thousands())

    users = list(per_user)[:TOP_USERS][::-1]  # largest at the top
    left = [0] * len(users)
    user_stacks = [_stack(totals) for _, totals in users]
    for k, colour in enumerate(_COLOURS):
        widths = [stack[k] for stack in user_stacks]
        by_user.barh(range(len(users)), widths, left=left, color=colour, height=0.7)
        left = [a + w for a, w in zip(left, widths, strict=True)]
    by_user.set_yticks(range(len(users)), [f"user {user}" for user, _ in users])
    by_user.set_title(f"Top {len(users)} users (all time)" if users else "No users yet")
    by_user.set_xlabel("tokens")
    by_user.xaxis.set_major_formatter(_thousands())

    total = sum((totals for _, totals in days), Totals())
    title = f"{total.tokens:,} tokens in {total.calls:,} model calls over {len(days)} days"
    if prices.configured:
        title += f"; estimated cost ${prices.cost(total):,.4f}"
    figure.suptitle(title)

    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()


def _thousands() -> Formatter:
    from matplotlib.ticker import FuncFormatter  # noqa: PLC0415

    return FuncFormatter(lambda value, _pos: _compact(value))


def _compact(value: float) -> str:
    """1,500 -> 1.5k, 2,000,000 -> 2M: axis labels that stay short."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.0f}"
