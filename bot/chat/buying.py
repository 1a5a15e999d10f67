"""/buy and /balance, the pre-checkout answer, and payments taken in (Telegram Stars:
bot/payments/; ``stars`` is ``None`` while STARS_USD is unset).

``/buy`` sends one invoice per pack (STAR_PACKS) into the chat it was sent in, made out
to the sender; the /buy button under the notice that nothing is left does the same for
whoever presses it. A ``pre_checkout_query`` is answered in its handler: Telegram waits
10 s, and the decision needs neither Redis nor the network
(:meth:`~bot.payments.Invoices.answer`). A ``successful_payment`` goes into the durable
intake as a turn of its own kind, which credits it once and confirms it once
(bot/turn/paying.py); it is taken in whoever paid (the Stars are spent: ALLOWED_USER_IDS
decided at the pre-checkout). A ``refunded_payment`` (the owner's ``python -m bot
refund``) is answered once the ledger holds the refund (a bounded wait: the command
records it right after Telegram's refund) with what it took from the user's credit,
once per refund. Answers are local, never sent to the model; a reply to one starts a
new conversation.
"""

from __future__ import annotations

import asyncio
import logging

from aiogram import Bot, F, Router
from aiogram.exceptions import TelegramAPIError
from aiogram.filters import Command
from aiogram.methods import SendInvoice
from aiogram.types import CallbackQuery, Message, PreCheckoutQuery

from ..bus.inbound import PAYMENT, Inbound, Paid
from ..bus.intake import Intake
from ..i18n import N_, _
from ..payments import (
    BUY_DATA,
    Entry,
    Invoices,
    Ledger,
    NotStarsError,
    PaymentNotFoundError,
    Stars,
    Terms,
    texts,
)
from ..telegram.notifier import Notifier
from .messages import Checked, is_group, notice, thread_of

log = logging.getLogger("replychain.payments")

#: The menu's entries for the commands (message ids), with payments on.
COMMANDS = (
    ("buy", N_("Buy credit with Telegram Stars")),
    ("balance", N_("Your credit, today's free allowance and your payments")),
    ("paysupport", N_("Help with a payment")),
    ("terms", N_("The terms of payments")),
)
#: /help's line with payments on.
HELP = N_(
    "/buy adds credit with Telegram Stars, used once your free allowance for the day is "
    "spent; /balance shows your credit and your payments; /terms, what credit is; "
    "/paysupport, where to get help with a payment."
)
#: Payments /balance lists.
LAST_PAYMENTS = 5
#: How long a ``refunded_payment`` waits for the refund's record, and how often it looks.
REFUND_WAIT = 10.0
REFUND_POLL = 0.25


def buy_router() -> Router:
    """/buy, /balance and the /buy button (behind ALLOWED_USER_IDS, as every command)."""
    router = Router(name="buy")
    router.message.register(on_buy, Command("buy"))
    router.message.register(on_balance, Command("balance"))
    router.message.register(on_pay_support, Command("paysupport"))
    router.message.register(on_terms, Command("terms"))
    router.callback_query.register(on_buy_button, Checked(F.data == BUY_DATA))
    return router


def payment_router() -> Router:
    """Pre-checkout queries and the payments' service messages, whoever sends them."""
    router = Router(name="payments")
    router.pre_checkout_query.register(on_pre_checkout)
    router.message.register(on_paid, Checked(F.successful_payment))
    router.message.register(on_refunded, Checked(F.refunded_payment))
    return router


async def on_buy(message: Message, *, notifier: Notifier, stars: Stars | None) -> None:
    if stars is None:
        notice(notifier, message, _(texts.PAYMENTS_OFF))
        return
    user = message.from_user.id if message.from_user else 0
    _send_invoices(notifier, stars, message, user, reply_to=message.message_id)


async def on_buy_button(query: CallbackQuery, *, notifier: Notifier, stars: Stars | None) -> None:
    """The button under the notice that nothing is left: invoices for the presser."""
    user = query.from_user.id
    if stars is None or not stars.terms.allows(user):
        refusal = texts.PAYMENTS_OFF if stars is None else texts.REFUSED_NOT_ALLOWED
        await query.answer(_(refusal), show_alert=True)
        return
    await query.answer()
    if isinstance(query.message, Message):  # (else too old to be reached)
        _send_invoices(notifier, stars, query.message, user, reply_to=None)


def _send_invoices(
    notifier: Notifier, stars: Stars, where: Message, user: int, *, reply_to: int | None
) -> None:
    """/buy's introduction and one invoice per pack, made out to ``user``, in the
    background (the update handler never waits on Telegram)."""
    chat, thread = where.chat.id, thread_of(where)
    intro = texts.buy_intro(stars.terms)  # (in the sender's language, as the invoices)
    invoices: list[SendInvoice] = stars.invoices.invoices(chat, user, thread_id=thread)

    async def send() -> list[int]:
        sent = [await notifier.out.send_text(chat, intro, reply_to=reply_to, thread_id=thread)]
        for invoice in invoices:
            sent.append((await notifier.out.bot(invoice)).message_id)
        return sent

    notifier.run(send, name=f"buy-{chat}", chat_id=chat)


async def on_balance(message: Message, *, notifier: Notifier, stars: Stars | None) -> None:
    if stars is None:
        notice(notifier, message, _(texts.PAYMENTS_OFF))
        return
    user = message.from_user.id if message.from_user else 0

    async def reply() -> None:
        allowance = await stars.spending.check(user)  # the spend so far drawn first
        entries = await stars.ledger.payments_of(user, LAST_PAYMENTS)
        text = texts.balance(allowance, entries, stars.spending.clock())
        notice(notifier, message, text, personal=True)

    notifier.run(reply, name=f"balance-{message.chat.id}")


async def on_pay_support(message: Message, *, notifier: Notifier, stars: Stars | None) -> None:
    """Where to get help with a payment (Telegram asks every bot that takes payments to
    answer /paysupport)."""
    if stars is None:
        notice(notifier, message, _(texts.PAYMENTS_OFF))
        return
    notice(notifier, message, texts.pay_support(stars.terms))


async def on_terms(message: Message, *, notifier: Notifier, stars: Stars | None) -> None:
    """The terms of payments (Telegram asks a bot that sells to show them)."""
    if stars is None:
        notice(notifier, message, _(texts.PAYMENTS_OFF))
        return
    notice(notifier, message, texts.payment_terms(stars.terms, stars.spending.clock()))


async def credit_lines(stars: Stars | None, user: int) -> list[str]:
    """/usage's lines about the credit (none without payments)."""
    if stars is None:
        return []
    allowance = await stars.spending.check(user)
    return texts.credit_lines(allowance, stars.spending.clock())


async def stars_line(stars: Stars | None) -> list[str]:
    """/stats' line of the Stars received (none without payments)."""
    if stars is None:
        return []
    return [texts.stars_received(await stars.ledger.stars_received())]


async def on_pre_checkout(query: PreCheckoutQuery, *, bot: Bot, stars: Stars | None) -> None:
    """Telegram's last question before it takes the Stars, answered at once."""
    if stars is not None:
        answer = stars.invoices.answer(query)
    else:
        answer = Invoices(Terms(), bot.token).answer(query)  # refused: no payments
    try:
        await bot(answer)
    except TelegramAPIError as exc:  # too late, or answered already: Telegram decided
        log.warning("pre-checkout query %s not answered: %s", query.id, exc.message)
        return
    if not answer.ok:
        log.info("pre-checkout of user %s refused: %s", query.from_user.id, answer.error_message)


async def on_paid(
    message: Message, *, bot: Bot, intake: Intake, stopping: asyncio.Event, stars: Stars | None
) -> None:
    """A payment: into the durable intake (its turn credits it, once), as a question is."""
    invoices = stars.invoices if stars is not None else Invoices(Terms(), bot.token)
    try:
        payment = invoices.payment(message)
    except NotStarsError:
        log.warning("a payment not in Telegram Stars in chat %s: ignored", message.chat.id)
        return
    if stars is None:
        log.error(
            "a payment of %d Stars (%s) came while STARS_USD is unset: it is recorded with no "
            "credit; refund it with `python -m bot refund %s`",
            payment.stars, payment.charge_id, payment.charge_id,
        )  # fmt: skip
    user = message.from_user
    inbound = Inbound(
        chat_id=message.chat.id, message_id=message.message_id, user_id=payment.user_id,
        text="", thread_id=thread_of(message), is_group=is_group(message), kind=PAYMENT,
        language=(user.language_code or "") if user else "",
        payment=Paid(payment.charge_id, payment.stars, payment.credit, payment.at),
    )  # fmt: skip
    if not await intake.record(inbound, stopping):
        await asyncio.Event().wait()  # stopping before it was stored: never confirm it


async def on_refunded(message: Message, *, notifier: Notifier, stars: Stars | None) -> None:
    """Telegram's note that a payment was refunded (the owner's ``refund`` did it): the
    user is told what the refund took from their credit, once."""
    refunded = message.refunded_payment
    charge = refunded.telegram_payment_charge_id if refunded else "?"
    log.info("payment %s in chat %s was refunded", charge, message.chat.id)
    if stars is None or refunded is None:
        return
    ledger = stars.ledger

    async def tell() -> None:
        entry = await _refund_recorded(ledger, charge)
        if entry is None:
            log.warning("refund of %s not in the ledger: the user is not told", charge)
        elif await ledger.refund_told(entry):  # (not a redelivered update)
            credit = (await ledger.balance(entry.payment.user_id)).credit
            notice(notifier, message, texts.refunded(entry, credit))

    notifier.run(tell, name=f"refund-{message.chat.id}")


async def _refund_recorded(ledger: Ledger, charge: str) -> Entry | None:
    """The payment once its refund is recorded, waiting at most :data:`REFUND_WAIT`
    (``None``: not a payment of the ledger's, or its refund never finished)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + REFUND_WAIT
    while True:
        try:
            entry = await ledger.find(charge)
        except PaymentNotFoundError:
            return None
        if entry.refund is not None:
            return entry
        if loop.time() >= until:
            return None
        await asyncio.sleep(REFUND_POLL)


def help_line(stars: Stars | None) -> str:
    """/help's line about payments ("" without them)."""
    return f"\n\n{_(HELP)}" if stars is not None else ""
