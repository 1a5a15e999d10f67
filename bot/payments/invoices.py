"""Invoices for packs of Stars, and the decision on a pre-checkout query.

An invoice's payload names the pack and the user it was made for, signed:
``p1.<stars>.<user id>.<signature>``, the signature the first 16 bytes of an
HMAC-SHA256 of the rest under a key derived from the bot token (base64url, 22
characters; 40 to 50 bytes in all, Telegram allows 128). Telegram shows an invoice to
anyone in the chat it is sent to, and a forwarded invoice can be paid by anyone; the
pre-checkout answer is ``ok`` only for the user the payload names, a pack still offered,
the price of that pack in Stars (currency ``XTR``), and a user the bot is open to.
A new bot token makes older invoices invalid (their payers are asked to send /buy).

What a payment credits is what the user paid (``total_amount`` Stars of a
``successful_payment``), to whoever paid: once Telegram took the Stars, they are never
lost for a payload this bot no longer likes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

from aiogram.methods import AnswerPreCheckoutQuery, SendInvoice
from aiogram.types import LabeledPrice, Message, PreCheckoutQuery

from ..i18n import _, speaking
from . import texts
from .records import NotStarsError, Payment
from .terms import Terms

#: Telegram Stars' currency code.
CURRENCY = "XTR"
_VERSION = "p1"
_SIGNATURE_BYTES = 16


def signing_key(token: str) -> bytes:
    """The key of the payloads' signatures, derived from the bot token (so it is
    secret, and the same in every process of the bot)."""
    return hmac.new(b"replychain invoice payload", token.encode(), hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class Order:
    """What an invoice offers: a pack of ``stars`` Stars, for ``user_id``."""

    stars: int
    user_id: int


def payload_of(order: Order, key: bytes) -> str:
    """The signed payload of an invoice for ``order``."""
    body = f"{_VERSION}.{order.stars}.{order.user_id}"
    return f"{body}.{_sign(body, key)}"


def order_of(payload: str, key: bytes) -> Order | None:
    """The order a payload names, or None when it is not one this bot signed."""
    body, _dot, signature = payload.rpartition(".")
    version, _, rest = body.partition(".")
    stars, _, user = rest.partition(".")
    if version != _VERSION or not (stars.isdigit() and stars.isascii() and user.isascii()):
        return None
    if not (user.isdigit() or (user[:1] == "-" and user[1:].isdigit())):
        return None
    if not hmac.compare_digest(signature.encode(), _sign(body, key).encode()):
        return None
    return Order(int(stars), int(user))


def _sign(body: str, key: bytes) -> str:
    digest = hmac.new(key, body.encode(), hashlib.sha256).digest()[:_SIGNATURE_BYTES]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class Invoices:
    """Builds the invoices /buy sends and answers pre-checkout queries."""

    def __init__(self, terms: Terms, token: str) -> None:
        self.terms = terms
        self._key = signing_key(token)

    def invoice(
        self, chat_id: int, user_id: int, stars: int, *, thread_id: int | None = None
    ) -> SendInvoice:
        """``sendInvoice`` for a pack of ``stars`` Stars for ``user_id``, in the current
        language: currency XTR, an empty provider token, one price in Stars."""
        return SendInvoice(
            chat_id=chat_id,
            message_thread_id=thread_id,
            title=texts.invoice_title(stars),
            description=texts.invoice_description(self.terms.credit_of(stars)),
            payload=payload_of(Order(stars, user_id), self._key),
            currency=CURRENCY,
            provider_token="",
            prices=[LabeledPrice(label=texts.stars(stars), amount=stars)],
        )

    def invoices(
        self, chat_id: int, user_id: int, *, thread_id: int | None = None
    ) -> list[SendInvoice]:
        """One invoice per pack (STAR_PACKS), for ``user_id``."""
        return [
            self.invoice(chat_id, user_id, stars, thread_id=thread_id) for stars in self.terms.packs
        ]

    def refusal(self, *, payer: int, currency: str, total: int, payload: str) -> str | None:
        """Why a pre-checkout query must be refused (a message id, translated where it is
        sent), or None to accept it."""
        terms = self.terms
        if not terms.on:
            return texts.PAYMENTS_OFF
        if not terms.allows(payer):
            return texts.REFUSED_NOT_ALLOWED
        order = order_of(payload, self._key)
        if order is None:
            return texts.REFUSED_FORGED
        if order.user_id != payer:
            return texts.REFUSED_NOT_YOURS
        if currency != CURRENCY or total != order.stars:
            return texts.REFUSED_FORGED
        if order.stars not in terms.packs:
            return texts.REFUSED_PACK_GONE
        return None

    def answer(self, query: PreCheckoutQuery) -> AnswerPreCheckoutQuery:
        """``answerPreCheckoutQuery`` for ``query`` (a refusal in the payer's language).
        Nothing here waits for Redis or the network: Telegram wants the answer within
        10 seconds."""
        refusal = self.refusal(
            payer=query.from_user.id,
            currency=query.currency,
            total=query.total_amount,
            payload=query.invoice_payload,
        )
        if refusal is None:
            return AnswerPreCheckoutQuery(pre_checkout_query_id=query.id, ok=True)
        with speaking(query.from_user.language_code):
            reason = _(refusal)
        return AnswerPreCheckoutQuery(
            pre_checkout_query_id=query.id, ok=False, error_message=reason
        )

    def payment(self, message: Message) -> Payment:
        """The payment a ``successful_payment`` message tells of, credited to its sender
        at STARS_USD (:meth:`Ledger.credit`); :class:`NotStarsError` for any other
        message or currency."""
        paid, user = message.successful_payment, message.from_user
        if paid is None or user is None or paid.currency != CURRENCY:
            raise NotStarsError(message.message_id)
        return Payment(
            charge_id=paid.telegram_payment_charge_id,
            user_id=user.id,
            stars=paid.total_amount,
            credit=self.terms.credit_of(paid.total_amount),
            at=int(message.date.timestamp()),
        )
