"""Payments against the test Bot API server: invoices as Telegram takes them, the
pre-checkout decision (forged, another user's, a pack gone, a stranger), a payment
credited once however often its update comes, the server's own rules (10 s, once, a
refund once), the owner's ``payments`` and ``refund`` commands, the settings, and the
texts in every language.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from aiogram import Bot
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import TelegramBadRequest
from aiogram.methods import SendInvoice
from aiogram.types import Chat, Message, SuccessfulPayment, Update, User
from redis.asyncio import Redis

from bot import i18n
from bot.__main__ import COMMANDS, build_parser, cmd_payments, cmd_refund
from bot.i18n import I18N, _
from bot.ops.payments import list_payments, refund
from bot.payments import (
    Invoices,
    Ledger,
    NotStarsError,
    Order,
    Payment,
    Spending,
    Terms,
    order_of,
    payload_of,
    signing_key,
    texts,
)
from bot.settings import MAX_PACK_STARS, Settings, SettingsError
from bot.settings_load import load_settings
from bot.telegram.errors import ChargeRefundedError, QueryClosedError
from bot.telegram.session import BotApiSession
from bot.usage.calls import utc_now

from .fakes.model import FakeOpenAI
from .fakes.telegram import FakeTelegram
from .harness import OTHER_USER, USER, env_for, settings_for
from .redis_server import RedisServer
from .test_ops import Result, cli
from .test_payments import CENT, TERMS, Clock, Spender

TOKEN = "123456:TEST-token-abcdefghijklmnopqrstuvw"


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    session = BotApiSession(api=TelegramAPIServer.from_base(tg.url))
    yield Bot(tg.token, session=session)
    await session.close()


class Updates:
    """getUpdates as a poller makes it, confirming what it took."""

    def __init__(self, bot: Bot) -> None:
        self.bot, self.offset = bot, 0

    async def take(self) -> list[Update]:
        found = await self.bot.get_updates(offset=self.offset, timeout=0)
        if found:
            self.offset = found[-1].update_id + 1
        return found


async def buy(tg: FakeTelegram, bot: Bot, invoices: Invoices, user: int, stars: int) -> Payment:
    """``user`` gets the invoice of a pack, pays it, and the bot accepts: the payment."""
    updates = Updates(bot)
    await updates.take()
    sent = await bot(invoices.invoice(user, user, stars))
    tg.pay(user, sent.message_id, user)
    [checkout] = await updates.take()
    assert checkout.pre_checkout_query is not None
    assert await bot(invoices.answer(checkout.pre_checkout_query))
    [paid] = await updates.take()
    assert paid.message is not None
    return invoices.payment(paid.message)


# ------------------------------------------------------------------ the flow


async def test_a_payment_through_telegram_is_credited_once_however_often_its_update_comes(
    tg: FakeTelegram, bot: Bot, redis: Redis
) -> None:
    invoices, updates, ledger = Invoices(TERMS, tg.token), Updates(bot), Ledger(redis)
    sent = [await bot(method) for method in invoices.invoices(USER, USER)]
    assert [m.invoice.total_amount for m in sent if m.invoice] == [50, 250, 1000]
    for call in tg.calls_to("sendInvoice"):
        assert call.params["currency"] == "XTR"
        assert call.params.get("provider_token", "") == ""  # (aiogram leaves "" out)
        [price] = call.params["prices"]
        stars = tg.stars.invoices[(USER, call.result["message_id"])]["total_amount"]
        assert price["amount"] == stars
        assert order_of(call.params["payload"], signing_key(tg.token)) == Order(stars, USER)
    tg.pay(USER, sent[1].message_id, USER)
    [checkout] = await updates.take()
    query = checkout.pre_checkout_query
    assert query is not None and query.total_amount == 250 and query.currency == "XTR"
    assert await bot(invoices.answer(query))
    [update] = await updates.take()
    assert update.message is not None and update.message.successful_payment is not None
    payment = invoices.payment(update.message)
    assert payment.user_id == USER and payment.stars == 250 and payment.credit == 250 * CENT
    assert list(tg.stars.charges) == [payment.charge_id]
    assert (await ledger.credit(payment)).new
    for _round in range(2):
        again = tg.redeliver(update.update_id)
        [redelivered] = await updates.take()
        assert redelivered.update_id == again and redelivered.message is not None
        assert not (await ledger.credit(invoices.payment(redelivered.message))).new
    assert (await ledger.balance(USER)).credit == 250 * CENT
    assert not tg.violations


async def test_pre_checkout_refuses_forged_and_other_users_payloads_in_the_payers_language(
    tg: FakeTelegram, bot: Bot
) -> None:
    tg.set_language(OTHER_USER, "de")
    invoices, updates = Invoices(TERMS, tg.token), Updates(bot)
    mine = await bot(invoices.invoice(USER, USER, 50))
    key = signing_key(tg.token)
    good = payload_of(Order(50, USER), key)
    forged, foreign = texts.REFUSED_FORGED, payload_of(Order(50, USER), signing_key("1:x"))
    forwarded = tg.pay(USER, mine.message_id, OTHER_USER)  # another user pays my invoice
    queries = {
        forwarded: texts.REFUSED_NOT_YOURS,
        tg.checkout(USER, good.replace(".50.", ".1000.", 1), 1000): forged,  # a changed pack
        tg.checkout(USER, foreign, 50): forged,  # signed with another bot's key
        tg.checkout(USER, "50", 50): forged,
        tg.checkout(USER, good, 5): forged,  # another price
        tg.checkout(USER, good, 50, currency="USD"): forged,
    }
    for update in await updates.take():
        if update.pre_checkout_query is not None:
            assert await bot(invoices.answer(update.pre_checkout_query))
    for query_id, refusal in queries.items():
        checkout = tg.stars.checkouts[query_id]
        assert checkout.ok is False, checkout
        with I18N.use_locale("de" if checkout.user_id == OTHER_USER else "en"):
            assert checkout.error_message == _(refusal), checkout
    assert "Rechnung" in (tg.stars.checkouts[forwarded].error_message or "")
    assert not tg.stars.charges and not await updates.take()  # no successful_payment
    # a pack no longer offered, a stranger, payments switched off
    assert (
        Invoices(Terms(CENT, (50,), 0), tg.token).refusal(
            payer=USER, currency="XTR", total=250, payload=payload_of(Order(250, USER), key)
        )
        == texts.REFUSED_PACK_GONE
    )
    stranger = Invoices(Terms(CENT, (50,), 0, allowed=frozenset({OTHER_USER})), tg.token)
    assert stranger.refusal(payer=USER, currency="XTR", total=50, payload=good) == (
        texts.REFUSED_NOT_ALLOWED
    )
    assert (
        Invoices(Terms(), tg.token).refusal(payer=USER, currency="XTR", total=50, payload=good)
        == texts.PAYMENTS_OFF
    )
    assert invoices.refusal(payer=USER, currency="XTR", total=50, payload=good) is None


async def test_the_test_server_holds_the_bot_to_telegrams_payment_rules() -> None:
    now = [1000.0]
    async with FakeTelegram(clock=lambda: now[0]) as tg:
        tg.add_private_chat(USER, "Ada")
        strict = Bot(tg.token, session=BotApiSession(api=TelegramAPIServer.from_base(tg.url)))
        try:
            invoices = Invoices(TERMS, tg.token)
            good = invoices.invoice(USER, USER, 50)
            for bad in (
                good.model_copy(update={"title": "x" * 33}),
                good.model_copy(update={"provider_token": "a-provider-token"}),
                good.model_copy(update={"prices": [*good.prices, *good.prices]}),
                good.model_copy(update={"payload": "p" * 129}),
            ):
                with pytest.raises(TelegramBadRequest):
                    await strict(bad)
            message = await strict(good)
            late = tg.pay(USER, message.message_id, USER)
            now[0] += 10.5
            with pytest.raises(QueryClosedError):  # Telegram waits 10 s, no more
                await strict.answer_pre_checkout_query(pre_checkout_query_id=late, ok=True)
            query = tg.pay(USER, message.message_id, USER)
            assert await strict.answer_pre_checkout_query(pre_checkout_query_id=query, ok=True)
            with pytest.raises(QueryClosedError):  # once
                await strict.answer_pre_checkout_query(pre_checkout_query_id=query, ok=True)
            assert len(tg.violations) == 2
            [charge] = tg.stars.charges
            with pytest.raises(TelegramBadRequest):  # not that user's
                await strict.refund_star_payment(
                    user_id=OTHER_USER, telegram_payment_charge_id=charge
                )
            assert await strict.refund_star_payment(user_id=USER, telegram_payment_charge_id=charge)
            with pytest.raises(ChargeRefundedError):  # once per charge
                await strict.refund_star_payment(user_id=USER, telegram_payment_charge_id=charge)
            assert tg.stars.charges[charge].refunded
        finally:
            await strict.session.close()


def test_a_successful_payment_credits_its_payer_what_they_paid_in_stars() -> None:
    invoices = Invoices(TERMS, TOKEN)
    at = datetime(2026, 5, 1, 12, tzinfo=UTC)

    def message(currency: str, total: int) -> Message:
        paid = SuccessfulPayment(
            currency=currency, total_amount=total, invoice_payload="anything",
            telegram_payment_charge_id="stx1", provider_payment_charge_id="",
        )  # fmt: skip
        chat = Chat(id=USER, type="private")
        user = User(id=USER, is_bot=False, first_name="Ada")
        return Message(message_id=7, date=at, chat=chat, from_user=user, successful_payment=paid)

    assert invoices.payment(message("XTR", 77)) == Payment(
        "stx1", USER, 77, 77 * CENT, int(at.timestamp())
    )
    with pytest.raises(NotStarsError):
        invoices.payment(message("USD", 77))


# ------------------------------------------------------------------ the owner's commands


class Killed(Exception):
    """The process dies here."""


async def test_the_owners_commands_list_payments_and_refund_each_once(
    tmp_path: Path, tg: FakeTelegram, bot: Bot, llm: FakeOpenAI, redis_server: RedisServer,
    redis: Redis, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """``python -m bot refund`` runs as a process once (a process takes seconds to
    import aiogram); the other runs call what the command line calls, in a thread with
    its own event loop, as the process does."""
    invoices, ledger = Invoices(TERMS, tg.token), Ledger(redis)
    small = await buy(tg, bot, invoices, USER, 50)
    large = await buy(tg, bot, invoices, USER, 250)
    other = await buy(tg, bot, invoices, OTHER_USER, 50)
    for payment in (small, large, other):
        assert (await ledger.credit(payment)).new
    await Spender(redis, utc_now).spend(USER, 5_000 + 100 * CENT)  # a dollar past the free
    values = {"stars_usd": "0.01", "free_daily_usd": "0.000005", "price_input_per_mtok": "1"}
    env = env_for(tg, llm, redis_server.url, **{k.upper(): v for k, v in values.items()})
    settings = settings_for(tg, llm, redis_server.url, **values)

    async def run(command: Callable[..., int], *args: Any, **kwargs: Any) -> Result:
        code = await asyncio.to_thread(command, settings, *args, **kwargs)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    refused = await cli(tmp_path, env, "refund", large.charge_id)  # $2.50 added, $2.00 left
    listed = await run(list_payments, None)
    assert listed.code == 0, listed
    assert "Stars received: 350 in 3 payment(s); 0 refunded" in listed.out
    assert all(p.charge_id in listed.out for p in (small, large, other))
    assert refused.code == 1 and "is spent" in refused.err and "--force" in refused.err, refused
    assert not tg.calls_to("refundStarPayment") and not tg.stars.charges[large.charge_id].refunded
    mine = await run(list_payments, USER)
    assert mine.code == 0, mine
    assert f"user {USER}: credit $2.00 (credited $3.00, refunded $0.00, spent $1.00" in mine.out
    assert other.charge_id not in mine.out and large.charge_id in mine.out

    forced = await run(refund, large.charge_id, force=True)
    assert forced.code == 0, forced
    assert "refunded 250 Stars" in forced.out and "now $0.00" in forced.out
    assert tg.stars.charges[large.charge_id].refunded
    again = await run(refund, large.charge_id, force=False)
    assert again.code == 0 and "refunded already" in again.out, again
    assert (await ledger.balance(USER)).credit == 0

    # killed after Telegram refunded, before the ledger heard: the command goes on
    async def then_killed(payment: Payment) -> None:
        await bot.refund_star_payment(
            user_id=payment.user_id, telegram_payment_charge_id=payment.charge_id
        )
        raise Killed

    with pytest.raises(Killed):
        await ledger.refund(other.charge_id, refund_stars=then_killed)
    resumed = await run(refund, other.charge_id, force=False)
    assert resumed.code == 0 and "refunded 50 Stars" in resumed.out, resumed
    assert (await ledger.balance(OTHER_USER)).credit == 0
    unknown = await run(refund, "stx-nothing", force=False)
    assert unknown.code == 1 and "no payment has the charge id" in unknown.err, unknown
    done = [c for c in tg.calls_to("refundStarPayment") if c.status == 200]
    assert sorted(c.params["telegram_payment_charge_id"] for c in done) == sorted(
        [large.charge_id, other.charge_id]
    )
    assert (await ledger.stars_received()).refunds == 2
    assert "Traceback" not in listed.err + refused.err + forced.err + resumed.err
    parsed = build_parser().parse_args(["payments", "--user", str(USER)])
    assert (COMMANDS[parsed.command], parsed.user) == (cmd_payments, USER)
    parsed = build_parser().parse_args(["refund", large.charge_id, "--force"])
    assert (COMMANDS[parsed.command], parsed.charge_id, parsed.force) == (
        cmd_refund,
        large.charge_id,
        True,
    )


# ------------------------------------------------------------------ settings and texts


def test_the_payment_settings_are_checked_and_become_exact_terms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base: dict[str, Any] = {"telegram_bot_token": TOKEN, "openai_api_key": "sk-test"}

    def settings(**values: Any) -> Settings:
        return Settings(_env_file=None, **base, **values)  # type: ignore[call-arg]

    budgeted = settings(stars_usd="0.013", star_packs=" 10, 100 ", user_daily_budget_usd=0.05)
    terms = Terms.of(budgeted)
    assert terms == Terms(13_000_000, (10, 100), 50_000_000)
    assert Terms.of(settings(stars_usd="0.01", free_daily_usd="0.000000001")).free_daily == 1
    assert Terms.of(settings(stars_usd="0.01")).free_daily == 0  # paid from the first answer
    assert Terms.of(settings(free_daily_usd="1")).free_daily is None  # no payments: unlimited
    assert settings(stars_usd=Decimal("0.01")).star_packs == (50, 250, 1000)
    for bad in ({"star_packs": "0"}, {"star_packs": "50,50"}, {"star_packs": "x"},
                {"star_packs": str(MAX_PACK_STARS + 1)}, {"stars_usd": "0.0000000001"},
                {"stars_usd": "0"}, {"free_daily_usd": "-1"}):  # fmt: skip
        with pytest.raises(ValueError):
            settings(**bad)
    for name in ("PRICE_INPUT_PER_MTOK", "PRICE_CACHED_INPUT_PER_MTOK", "PRICE_OUTPUT_PER_MTOK",
                 "MODELS_FILE"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("STARS_USD", "0.01")
    with pytest.raises(SettingsError, match="STARS_USD is invalid: no model has prices"):
        load_settings(env_file=None)
    monkeypatch.setenv("PRICE_OUTPUT_PER_MTOK", "0.6")
    assert load_settings(env_file=None).stars_usd == Decimal("0.01")


def test_every_payment_text_fits_where_telegram_puts_it_in_every_language() -> None:
    """An invoice's title at most 32 characters, its description 255, for any pack."""
    terms = Terms(nano_per_star=123_456_789, packs=(1, 99_999, MAX_PACK_STARS), free_daily=0)
    invoices = Invoices(terms, TOKEN)
    for language in i18n.languages():
        with I18N.use_locale(language):
            for stars in terms.packs:
                invoice: SendInvoice = invoices.invoice(USER, USER, stars)
                assert 1 <= len(invoice.title) <= 32, (language, invoice.title)
                assert 1 <= len(invoice.description) <= 255, (language, invoice.description)
                assert invoice.currency == "XTR" and invoice.provider_token == ""
                [price] = invoice.prices
                assert price.amount == stars and price.label == texts.stars(stars)
            refusals = (texts.REFUSED_FORGED, texts.REFUSED_NOT_YOURS, texts.REFUSED_PACK_GONE,
                        texts.REFUSED_NOT_ALLOWED, texts.PAYMENTS_OFF)  # fmt: skip
            assert all(len(_(refusal)) <= 200 for refusal in refusals)


async def test_the_users_texts_show_exact_money_in_their_language(redis: Redis) -> None:
    clock = Clock()
    ledger, spending = Ledger(redis, clock=clock), Spending(redis, TERMS, clock=clock)
    credited = await ledger.credit(Payment("stx1", USER, 1, CENT, int(clock.now.timestamp())))
    await Spender(redis, clock).spend(USER, 5_000 + 1_000)
    allowance = await spending.check(USER)
    entries = await ledger.payments_of(USER)
    with i18n.speaking("en"):
        assert texts.paid(credited, allowance.credit) == (
            "Thank you! 1 Star added $0.01 to your credit, which is now $0.0099."
        )
        shown = texts.balance(allowance, entries, clock.now).splitlines()
        assert shown[0] == "Credit: $0.0099"  # $0.009999: never shown larger
        assert shown[1].startswith("Free today: $0.00 of $0.0000 left (renewed at 12:00")
    with i18n.speaking("de"):
        assert "1 Stern" in texts.paid(credited, allowance.credit)
        assert "Guthaben" in texts.balance(allowance, entries, clock.now)
