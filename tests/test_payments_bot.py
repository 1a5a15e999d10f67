"""Payments wired into the bot (issue 46), end to end: the real bot (aiogram over HTTP to
the test Bot API server, the openai SDK to the test model server, a real redis-server).

/buy sends an XTR invoice per pack; the bot answers pre-checkout queries (a forged or
another user's payload refused); a payment goes through the durable intake and is
credited once with one confirmation, however often its update comes, whatever kills the
bot (SIGKILL before the update is taken, after the credit) and with two processes
running its turn; spend draws the day's free allowance, then the credit, and with
neither left the next question is refused before any model call, with the /buy button;
a refund calls refundStarPayment once, takes the credit back, and is not made twice.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.data import keys
from bot.i18n import I18N, _
from bot.ops.payments import refund
from bot.payments import (
    BUY_DATA,
    Balance,
    Ledger,
    Order,
    Spending,
    Terms,
    order_of,
    owed,
    payload_of,
    signing_key,
    texts,
)
from bot.payments.terms import nano
from bot.usage.calls import day_of, utc_now

from .fakes.model import FakeOpenAI
from .fakes.telegram import Call, FakeTelegram, StoredMessage
from .harness import (
    OTHER_USER,
    USER,
    BotFactory,
    BotProcess,
    ask,
    env_for,
    settings_for,
    turns_done,
)
from .redis_server import RedisServer

CENT = 10_000_000  # nano-dollars
#: A Star buys a cent; a prompt token costs 1,000 nano-dollars (1 USD per million).
STARS = {"stars_usd": "0.01", "price_input_per_mtok": "1"}


def env_with_stars(tg: FakeTelegram, llm: FakeOpenAI, url: str, **extra: str) -> dict[str, str]:
    return env_for(tg, llm, url, STARS_USD="0.01", PRICE_INPUT_PER_MTOK="1", **extra)


def sent(tg: FakeTelegram, chat: int, text: str) -> int:
    return int(tg.send_user_message(chat, USER if chat == USER else chat, text)["message_id"])


def payments_in(tg: FakeTelegram, chat: int) -> list[StoredMessage]:
    """The ``successful_payment`` messages of the chat."""
    return [m for m in tg.messages(chat) if "successful_payment" in m.raw]


def confirmations(tg: FakeTelegram, chat: int) -> list[StoredMessage]:
    """The bot's answers to the chat's payments (one per payment, exactly)."""
    paid = {m.message_id for m in payments_in(tg, chat)}
    return [m for m in tg.bot_messages(chat) if m.reply_to in paid]


def replies(tg: FakeTelegram, chat: int, message_id: int) -> list[StoredMessage]:
    return [m for m in tg.bot_messages(chat) if m.reply_to == message_id]


def invoices_of(tg: FakeTelegram, chat: int) -> dict[int, int]:
    """The bot's invoices in the chat: message id -> Stars."""
    return {m: i["total_amount"] for (c, m), i in tg.stars.invoices.items() if c == chat}


async def balance(redis: Redis, user: int = USER) -> Balance:
    return await Ledger(redis).balance(user)


async def intake_drained(redis: Redis, added: int, timeout: float = 30.0) -> None:  # noqa: ASYNC109
    """Wait until ``added`` entries went into the intake and every one was acknowledged
    (a turn acknowledges its entry, and deletes it, once it has ended)."""
    async with asyncio.timeout(timeout):
        while True:
            info = await redis.xinfo_stream(keys.INTAKE_STREAM)
            if info["entries-added"] >= added and info["length"] == 0:
                return
            await asyncio.sleep(0.02)  # polling a condition, bounded above


# ------------------------------------------------------------------ in one process


async def test_buy_sends_an_xtr_invoice_per_pack_and_a_payment_is_credited_and_confirmed_once(
    tg: FakeTelegram, start_bot: BotFactory, redis: Redis
) -> None:
    support = "@help_desk <support@example.com>"  # plain text: never parsed as HTML
    async with start_bot(**STARS, owner_user_ids=frozenset({USER}), pay_support=support) as app:
        buy = sent(tg, USER, "/buy")
        await tg.wait_for(lambda: len(invoices_of(tg, USER)) == 3, what="three invoices")
        [intro] = replies(tg, USER, buy)
        assert intro.text == "Credit pays for answers once your free allowance for the day is " \
            "spent; one Star buys $0.01. Choose a pack:"  # fmt: skip
        key = signing_key(tg.token)
        for call in tg.calls_to("sendInvoice"):
            [price] = call.params["prices"]
            assert call.params["currency"] == "XTR" and not call.params.get("provider_token")
            assert order_of(call.params["payload"], key) == Order(price["amount"], USER)
        assert sorted(invoices_of(tg, USER).values()) == [50, 250, 1000]
        pack = next(m for m, stars in invoices_of(tg, USER).items() if stars == 250)

        query = tg.pay(USER, pack, USER)
        await tg.wait_for(lambda: len(confirmations(tg, USER)) == 1, what="a confirmation")
        assert tg.stars.checkouts[query].ok is True
        [confirmed] = confirmations(tg, USER)
        assert (
            confirmed.text == "Thank you! 250 Stars added $2.50 to your credit, which is now $2.50."
        )
        [paid] = [u for u in tg.stars.updates.values() if "message" in u]
        for _round in range(2):  # the same successful_payment, delivered again
            tg.redeliver(paid["update_id"])
        await turns_done(tg, app, 3)  # the payment's turn, and each delivery's again
        assert (await balance(redis)).credit == 250 * CENT
        assert len(confirmations(tg, USER)) == 1
        stars = await Ledger(redis).stars_received()
        assert (stars.stars, stars.payments) == (250, 1)

        shown = sent(tg, USER, "/balance")
        await tg.wait_for(lambda: bool(replies(tg, USER, shown)))
        [text] = [m.text or "" for m in replies(tg, USER, shown)]
        assert text.startswith("Credit: $2.50\n") and ": 250 Stars, $2.50" in text, text
        # what Telegram asks of a bot that sells: where to get help, and its terms
        help_asked, terms_asked = sent(tg, USER, "/paysupport"), sent(tg, USER, "/terms")
        await tg.wait_for(lambda: bool(replies(tg, USER, terms_asked)))
        await tg.wait_for(lambda: bool(replies(tg, USER, help_asked)))
        [support_text] = [m.text for m in replies(tg, USER, help_asked)]
        assert support_text == f"Help with a payment or a refund: {support}. Name the " \
            "payment by its day and Stars, as /balance lists them."  # fmt: skip
        [terms_text] = [m.text or "" for m in replies(tg, USER, terms_asked)]
        assert terms_text.startswith("Credit pays for this bot's answers: one Star buys $0.01.")
        assert "/paysupport" in terms_text and "free" not in terms_text  # no free allowance
        usage = sent(tg, USER, "/usage")
        await tg.wait_for(lambda: bool(replies(tg, USER, usage)))
        assert "Credit: $2.50" in (replies(tg, USER, usage)[0].text or "")
        stats = sent(tg, USER, "/stats")
        await tg.wait_for(lambda: bool(replies(tg, USER, stats)))
        assert "Stars received: 250 in 1 payments, 0 refunded." in (
            replies(tg, USER, stats)[0].text or ""
        )
        # a reply to the confirmation starts a new conversation
        again = tg.send_user_message(USER, USER, "hello", reply_to=confirmed.message_id)
        await tg.wait_for(lambda: bool(replies(tg, USER, again["message_id"])))
        assert (replies(tg, USER, again["message_id"])[0].text or "").startswith("[depth:2] ")
    menus = [c.params for c in tg.calls_to("setMyCommands") if "language_code" not in c.params]
    listed = {c["command"] for c in menus[-1]["commands"]}
    assert {"buy", "balance", "paysupport", "terms"} <= listed
    assert not tg.violations


async def test_pre_checkout_refuses_a_forged_or_another_users_payload_and_nothing_is_credited(
    tg: FakeTelegram, start_bot: BotFactory, redis: Redis
) -> None:
    tg.set_language(OTHER_USER, "de")
    async with start_bot(**STARS):
        sent(tg, USER, "/buy")
        await tg.wait_for(lambda: len(invoices_of(tg, USER)) == 3)
        pack = min(invoices_of(tg, USER))
        mine = payload_of(Order(50, USER), signing_key(tg.token))
        refused = {
            tg.pay(USER, pack, OTHER_USER): texts.REFUSED_NOT_YOURS,  # a forwarded invoice
            tg.checkout(USER, mine.replace(".50.", ".1000.", 1), 1000): texts.REFUSED_FORGED,
            tg.checkout(USER, payload_of(Order(50, USER), b"not the key"), 50): (
                texts.REFUSED_FORGED
            ),
            tg.checkout(USER, mine, 5): texts.REFUSED_FORGED,  # another price
        }
        await tg.wait_for(lambda: all(tg.stars.checkouts[q].ok is not None for q in refused))
        for query, refusal in refused.items():
            checkout = tg.stars.checkouts[query]
            assert checkout.ok is False
            with_language = "de" if checkout.user_id == OTHER_USER else "en"
            with I18N.use_locale(with_language):
                assert checkout.error_message == _(refusal)
        assert not tg.stars.charges
        assert (await balance(redis)).credited == (await balance(redis, OTHER_USER)).credited == 0
    assert not tg.violations


async def test_spend_draws_the_free_allowance_then_the_credit_and_at_zero_nothing_is_asked(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    """Each question costs about 20 cents (a prompt token costs a quarter cent); 30 cents a day are
    free. The numbers are checked exactly against what the usage totals hold."""
    free = nano(Decimal("0.30"))
    spending = Spending(redis, Terms(CENT, (50,), free))

    async def spent() -> int:
        """What USER spent today, as the usage totals hold it (nano-dollars)."""
        today = keys.usage_total_key(keys.usage_bucket(USER), "u", USER, day_of(utc_now()))
        return int(await redis.hget(today, "d") or 0)

    async def asked(text: str) -> list[StoredMessage]:
        ended = app.runner.completed  # (every earlier turn has ended)
        message = sent(tg, USER, text)
        await turns_done(tg, app, ended + 1)  # answered, and its final write made
        return replies(tg, USER, message)

    settings: dict[str, Any] = {
        "stars_usd": "0.01", "free_daily_usd": "0.30", "price_input_per_mtok": "2500",
        "star_packs": (50,),
    }  # fmt: skip
    async with start_bot(**settings) as app:
        # the free allowance first: nothing drawn from the (empty) credit
        [first] = await asked("first question")
        assert first.text == "[depth:2] echo: first question"
        assert 0 < await spent() < free and await balance(redis) == Balance()
        # past the free allowance with no credit: answered, the rest written off
        await asked("second question")
        over = owed(await spent(), free)
        assert over > 0 and await balance(redis) == Balance(lost=over)  # drawn on its record
        calls = len(llm.requests)
        [notice] = await asked("third question")
        assert len(llm.requests) == calls  # no model call
        assert (notice.text or "").startswith(
            "You have used today's free allowance and have no credit left. Send /buy to add "
            "credit, or wait until "
        )
        # the /buy button: an invoice for whoever presses it, paid
        tg.press_button(USER, notice.message_id, USER, BUY_DATA)
        await tg.wait_for(lambda: len(invoices_of(tg, USER)) == 1)
        tg.pay(USER, next(iter(invoices_of(tg, USER))), USER)
        await tg.wait_for(lambda: len(confirmations(tg, USER)) == 1)
        await turns_done(tg, app, 4)  # three questions, then the payment
        assert (confirmations(tg, USER)[0].text or "").endswith("which is now $0.50.")
        # then the credit, to the nano-dollar, until none is left
        answered = 0
        while True:
            before = await spent()
            [reply] = await asked(f"paid question {answered}")
            if not (reply.text or "").startswith("[depth:2]"):
                break
            answered += 1
            cost = await spent() - before
            now = await balance(redis)
            assert now.used + now.lost == owed(await spent(), free)
            assert now.credit == now.credited - now.used == max(50 * CENT - now.used, 0)
            assert cost > 0 and answered < 5
        assert answered >= 2  # the credit paid for answers, the last one in part
        assert (reply.text or "").startswith("You have used today's free allowance and have no")
        assert reply.reply_markup is not None  # the /buy button
        final = await balance(redis)
        assert final.credit == 0 and final.used == 50 * CENT
        assert final.used + final.lost == owed(await spent(), free)
        assert (await spending.check(USER)).credit == 0
        assert len(llm.requests) == calls + answered
    assert not tg.violations


async def test_pictures_draw_the_free_allowance_then_the_credit_and_at_zero_none_is_made(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis
) -> None:
    """A picture (4 cents) is spend like an answer: the free allowance (4 cents) pays the
    first; with nothing left the next ``/image`` gets the notice with the /buy button and
    no image call; once paid for, the credit pays, to the nano-dollar."""
    catalogue = tmp_path / "models.toml"
    catalogue.write_text(
        f'[models.chat]\nmodel = "test-model"\nbase_url = "{llm.base_url}"\ndefault = true\n'
        "price_input = 1\n"
        f'[models.painter]\nkind = "image"\nmodel = "gpt-image-1"\nbase_url = "{llm.base_url}"\n'
        "price_per_image = 0.04\n"
    )
    free = nano(Decimal("0.04"))
    spending = Spending(redis, Terms(CENT, (50,), free))
    settings: dict[str, Any] = {
        "models_file": catalogue, "image_model": "painter", "stars_usd": "0.01",
        "free_daily_usd": "0.04", "star_packs": (50,),
    }  # fmt: skip
    async with start_bot(**settings) as app:
        first, _ = await ask(tg, app, USER, "/image a red cube")
        assert replies(tg, USER, first)[0].photo is not None  # the free allowance's
        refused, text = await ask(tg, app, USER, "/image a blue cube")
        assert text.startswith("You have used today's free allowance and have no credit left")
        assert replies(tg, USER, refused)[0].reply_markup is not None  # the /buy button
        assert len(llm.image_requests) == 1
        sent(tg, USER, "/buy")
        await tg.wait_for(lambda: len(invoices_of(tg, USER)) == 1)
        tg.pay(USER, next(iter(invoices_of(tg, USER))), USER)
        await tg.wait_for(lambda: len(confirmations(tg, USER)) == 1)
        await turns_done(tg, app, 3)  # two pictures asked for, then the payment
        paid, _ = await ask(tg, app, USER, "/image a green cube")
        assert replies(tg, USER, paid)[0].photo is not None and len(llm.image_requests) == 2
        assert (await spending.check(USER)).credit == 50 * CENT - 4 * CENT
    assert not tg.violations


async def test_a_refund_calls_refund_star_payment_once_takes_the_credit_back_and_is_not_repeated(
    tg: FakeTelegram, llm: FakeOpenAI, start_bot: BotFactory, redis: Redis,
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, logger="replychain.payments")
    settings = settings_for(tg, llm, redis_server.url, **STARS)
    async with start_bot(**STARS):
        sent(tg, USER, "/buy")
        await tg.wait_for(lambda: len(invoices_of(tg, USER)) == 3)
        pack = next(m for m, stars in invoices_of(tg, USER).items() if stars == 250)
        query = tg.pay(USER, pack, USER)
        await tg.wait_for(lambda: len(confirmations(tg, USER)) == 1)
        charge = tg.stars.checkouts[query].charge_id
        assert charge is not None and (await balance(redis)).credit == 250 * CENT
        first = await asyncio.to_thread(refund, settings, charge, force=False)
        assert first == 0
        assert (await balance(redis)).credit == 0 and tg.stars.charges[charge].refunded
        second = await asyncio.to_thread(refund, settings, charge, force=False)
        assert second == 0  # said: refunded already
        # Telegram's refunded_payment message: the user is told what it took, once,
        # even when Telegram delivers the update again
        refunded = [m for m in tg.messages(USER) if "refunded_payment" in m.raw]
        assert len(refunded) == 1
        await tg.wait_for(lambda: len(replies(tg, USER, refunded[0].message_id)) == 1)
        update = next(
            u
            for u, body in tg.stars.updates.items()
            if "refunded_payment" in body.get("message", {})
        )
        tg.redeliver(update)
        await tg.wait_for(
            lambda: sum("was refunded" in r.getMessage() for r in caplog.records) == 2
        )
        await tg.wait_for(lambda: tg.pending_updates == 0)
    # (the bot's shutdown ran every answer it had begun)
    told = replies(tg, USER, refunded[0].message_id)
    assert [m.text for m in told] == [
        "Your payment of 250 Stars was refunded; $2.50 was taken from your credit, which is "
        "now $0.00."
    ]
    assert [c.status for c in tg.calls_to("refundStarPayment")] == [200]
    assert (await balance(redis)).refunded == 250 * CENT
    assert (await Ledger(redis).stars_received()).refunds == 1
    assert not tg.violations


# ------------------------------------------------------------------ processes killed


async def test_a_payment_is_credited_and_confirmed_once_whatever_kills_the_bot(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    """SIGKILLed the moment the payment's update is in the intake (Telegram failing the
    confirmation meanwhile, so the turn cannot have finished; it may have credited the
    payment or not): after the restart one credit, one confirmation, and the update
    delivered again changes nothing."""
    env = env_with_stars(tg, llm, redis_server.url)
    first = BotProcess(env, tmp_path)
    await first.start()
    await tg.wait_for(lambda: tg.polling, 60, what="the first process polls")
    tg.fail_next("sendMessage", status=500, count=1000, chat_id=USER)
    query = tg.checkout(USER, payload_of(Order(50, USER), signing_key(tg.token)), 50)
    async with asyncio.timeout(30):
        while not await redis.xlen(keys.INTAKE_STREAM):  # noqa: ASYNC110 - the kill's moment
            await asyncio.sleep(0.002)
    await first.kill()
    assert tg.stars.checkouts[query].ok is True
    assert not confirmations(tg, USER)
    tg.clear_faults()
    second = BotProcess(env, tmp_path)
    await second.start()
    await tg.wait_for(lambda: len(confirmations(tg, USER)) == 1, 60, what="a confirmation")
    [paid] = [u for u in tg.stars.updates.values() if "message" in u]
    tg.redeliver(paid["update_id"])  # and Telegram delivers it once more
    await intake_drained(redis, 2)  # taken in again, its turn found done
    await second.terminate()
    [confirmed] = confirmations(tg, USER)
    assert confirmed.text == "Thank you! 50 Stars added $0.50 to your credit, which is now $0.50."
    ledger = Ledger(redis)
    assert (await ledger.balance(USER)).credit == 50 * CENT
    assert (await ledger.stars_received()).payments == 1
    assert "Traceback" not in second.text


async def test_two_processes_running_one_payments_turn_credit_and_confirm_it_once(
    tmp_path: Path, tg: FakeTelegram, llm: FakeOpenAI, redis_server: RedisServer, redis: Redis
) -> None:
    """The process running the payment's turn is frozen (SIGSTOP) after the credit, inside
    the confirmation's call that Telegram fails; the other takes the turn over and
    confirms; the first comes back mid-retry and sends nothing (its claim is no longer
    confirmed)."""
    env = env_with_stars(tg, llm, redis_server.url, TAKEOVER_SECONDS="3")
    processes = {name: BotProcess({**env, "BOT_INSTANCE": name}, tmp_path) for name in "ab"}
    for process in processes.values():
        await process.start()
    await tg.wait_for(lambda: tg.polling, 60, what="a process polls")
    await tg.wait_for(lambda: sum(c.method == "getMe" for c in tg.calls) >= 2, 60)
    held: list[BotProcess] = []

    async def freeze(_call: Call) -> None:
        """In the failing call (credited, noted, its confirmation failing), before its
        answer: the lease's holder stops, whatever the machine's load (not after a
        retry or three, which would end its run with the error)."""
        tg.after_fault = None
        [lease] = [key async for key in redis.scan_iter(match=f"rc:{{{USER}}}:lease:*")]
        owner = await redis.get(lease)
        process = processes[owner.decode() if isinstance(owner, bytes) else str(owner)]
        assert process.proc is not None
        os.kill(process.proc.pid, signal.SIGSTOP)
        tg.clear_faults()
        held.append(process)

    tg.after_fault = freeze
    tg.fail_next("sendMessage", status=500, count=1000, chat_id=USER)
    tg.checkout(USER, payload_of(Order(50, USER), signing_key(tg.token)), 50)
    await tg.wait_for(lambda: bool(held), 30, what="the holder frozen in its failing call")
    [frozen] = held
    assert frozen.proc is not None
    try:
        await tg.wait_for(lambda: len(confirmations(tg, USER)) == 1, 60, what="a confirmation")
    finally:
        os.kill(frozen.proc.pid, signal.SIGCONT)
    [paid] = [u for u in tg.stars.updates.values() if "message" in u]
    # the frozen one runs on: it finds the turn taken, and stops its run
    await frozen.wait_for_output("was taken over by another process")
    tg.redeliver(paid["update_id"])
    await intake_drained(redis, 2)  # taken in again, its turn found done
    for process in processes.values():
        await process.terminate()
    assert len(confirmations(tg, USER)) == 1
    ledger = Ledger(redis)
    assert (await ledger.balance(USER)).credit == 50 * CENT
    assert (await ledger.stars_received()).payments == 1
    assert "Traceback" not in "".join(p.text for p in processes.values())
