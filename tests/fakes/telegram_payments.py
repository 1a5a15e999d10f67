"""The fake Telegram server's Telegram Stars payments: invoices, pre-checkout queries,
successful payments (and their redelivery) and refunds."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from typing import Any

from .telegram_markup import _reply_markup
from .telegram_messages import Messages
from .telegram_types import JSON, Checkout, StarCharge, _ApiError, _coerce_int, _truthy, _update_id


class Payments(Messages):
    def _methods(self) -> dict[str, Callable[[JSON], Any]]:
        return {
            **super()._methods(),
            "sendInvoice": self._send_invoice,
            "answerPreCheckoutQuery": self._answer_pre_checkout_query,
            "refundStarPayment": self._refund_star_payment,
        }

    def pay(self, chat_id: int, message_id: int, user_id: int) -> str:
        """``user_id`` presses Pay on the invoice the bot sent as ``message_id`` (anyone may:
        a forwarded invoice can be paid by anyone). Queues the ``pre_checkout_query``, as
        Telegram does; once the bot answers it ok, the ``successful_payment`` message
        update follows (in the payer's private chat with the bot, else the invoice's
        chat). Returns the query's id."""
        invoice = self.stars.invoices.get((chat_id, message_id))
        if invoice is None:
            raise ValueError(f"message {message_id} in chat {chat_id} is no invoice of the bot")
        payer_chat = user_id if user_id in self._chats else chat_id
        return self.checkout(
            user_id, invoice["payload"], invoice["total_amount"],
            currency=invoice["currency"], chat_id=payer_chat,
        )  # fmt: skip

    def checkout(
        self,
        user_id: int,
        payload: str,
        total_amount: int,
        *,
        currency: str = "XTR",
        chat_id: int | None = None,
    ) -> str:
        """A ``pre_checkout_query`` for any invoice (one made elsewhere, or a payload a
        test forged); the ``successful_payment`` goes to ``chat_id`` (default: the
        payer's private chat). Returns the query's id."""
        chat = self._chat(user_id if chat_id is None else chat_id)
        query_id = str(5_000_000_000_000 + len(self.stars.checkouts))
        self.stars.checkouts[query_id] = Checkout(
            user_id, chat.id, currency, total_amount, payload, self._clock()
        )
        query = {
            "id": query_id, "from": self._ensure_user(user_id).as_dict(), "currency": currency,
            "total_amount": total_amount, "invoice_payload": payload,
        }  # fmt: skip
        self._payment_update({"pre_checkout_query": query})
        return query_id

    def expire_checkout(self, query_id: str) -> None:
        """The query can no longer be answered (more than 10 s passed)."""
        self.stars.checkouts[query_id].expired = True

    def redeliver(self, update_id: int) -> int:
        """The same update once more (a payment helper's, or one still pending), as
        Telegram sends an update again that it holds unconfirmed: same content, here
        under a new update_id so that a poller already past it gets it. Returns the id."""
        update = self.stars.updates.get(update_id) or next(
            (u for u in self._updates if _update_id(u) == update_id), None
        )
        if update is None:
            raise ValueError(f"no update {update_id} to deliver again")
        return self._payment_update({k: v for k, v in update.items() if k != "update_id"})

    def _payment_update(self, update: JSON) -> int:
        update_id = self.push_update(update)
        self.stars.updates[update_id] = {"update_id": update_id, **copy.deepcopy(update)}
        return update_id

    def _send_invoice(self, params: JSON) -> JSON:
        """sendInvoice, checked as Telegram checks a Stars invoice (currency XTR: one
        price, a whole number of Stars, no provider token); other currencies need one."""
        chat = self._target_chat(params)
        title, description = str(params.get("title") or ""), str(params.get("description") or "")
        payload, currency = str(params.get("payload") or ""), str(params.get("currency") or "")
        if not 1 <= len(title) <= 32:
            raise _ApiError(400, "Bad Request: TITLE_INVALID")
        if not 1 <= len(description) <= 255:
            raise _ApiError(400, "Bad Request: DESCRIPTION_INVALID")
        if not 1 <= len(payload.encode()) <= 128:
            raise _ApiError(400, "Bad Request: INVOICE_PAYLOAD_INVALID")
        prices = params.get("prices")
        priced = isinstance(prices, list) and all(
            isinstance(p, dict) and p.get("label") and isinstance(p.get("amount"), int)
            for p in prices
        )
        if not priced or not prices:
            raise _ApiError(400, "Bad Request: can't parse prices JSON object")
        total = sum(int(p["amount"]) for p in prices)
        if currency == "XTR":
            if params.get("provider_token") or len(prices) != 1 or total < 1:
                raise _ApiError(400, "Bad Request: STARS_INVOICE_INVALID")
        elif not params.get("provider_token"):
            raise _ApiError(400, "Bad Request: PAYMENT_PROVIDER_INVALID")
        thread_id, reply = self._placement(chat, params)
        start = str(params.get("start_parameter") or "")
        invoice = {"title": title, "description": description, "currency": currency,
                   "total_amount": total, "start_parameter": start}  # fmt: skip
        message = self._store(
            chat, self._bot_user(), is_bot=True, thread_id=thread_id, reply=reply,
            reply_markup=_reply_markup(params, chat), extra={"invoice": invoice},
        )  # fmt: skip
        self.stars.invoices[(chat.id, message.message_id)] = {**invoice, "payload": payload}
        return copy.deepcopy(message.raw)

    def _answer_pre_checkout_query(self, params: JSON) -> bool:
        """Once per query and within 10 s of it (else Telegram's "query is too old"); an
        accepted query's ``successful_payment`` message update follows."""
        query_id = str(params.get("pre_checkout_query_id") or "")
        query = self.stars.checkouts.get(query_id)
        late = query is not None and self._clock() - query.at > 10
        if query is not None and (query.ok is not None or late):
            self.violations.append(
                f"answerPreCheckoutQuery {query_id}: "
                + ("answered again" if query.ok is not None else "answered after 10 s")
            )
        if query is None or query.ok is not None or query.expired or late:
            raise _ApiError(
                400,
                "Bad Request: query is too old and response timeout expired or query ID is invalid",
            )
        ok, error = _truthy(params.get("ok")), params.get("error_message")
        if not ok and not error:
            raise _ApiError(400, "Bad Request: ERROR_MESSAGE_EMPTY")
        query.ok, query.error_message = ok, None if ok else str(error)
        if ok:
            charge = "stx" + hashlib.sha256(f"charge:{query_id}".encode()).hexdigest()[:40]
            query.charge_id = charge
            self.stars.charges[charge] = StarCharge(
                query.user_id, query.total_amount, query.payload
            )
            paid = {
                "currency": query.currency, "total_amount": query.total_amount,
                "invoice_payload": query.payload, "telegram_payment_charge_id": charge,
                "provider_payment_charge_id": "",
            }  # fmt: skip
            sender = self._ensure_user(query.user_id).as_dict()
            message = self._store(
                self._chat(query.chat_id), sender, is_bot=False,
                extra={"successful_payment": paid},
            )  # fmt: skip
            self._payment_update({"message": copy.deepcopy(message.raw)})
        return True

    def _refund_star_payment(self, params: JSON) -> bool:
        """Gives a payment's Stars back, once per charge; as Telegram does, the payer's chat
        with the bot gets a ``refunded_payment`` service message (an update)."""
        charge_id = str(params.get("telegram_payment_charge_id") or "")
        charge = self.stars.charges.get(charge_id)
        if charge is None:
            raise _ApiError(400, "Bad Request: CHARGE_ID_INVALID")
        if charge.user_id != _coerce_int(params.get("user_id")):
            raise _ApiError(400, "Bad Request: USER_ID_INVALID")
        if charge.refunded:
            raise _ApiError(400, "Bad Request: CHARGE_ALREADY_REFUNDED")
        charge.refunded = True
        if charge.user_id in self._chats:
            refunded = {
                "currency": "XTR", "total_amount": charge.total_amount,
                "invoice_payload": charge.payload, "telegram_payment_charge_id": charge_id,
            }  # fmt: skip
            message = self._store(
                self._chat(charge.user_id), self._ensure_user(charge.user_id).as_dict(),
                is_bot=False, extra={"refunded_payment": refunded},
            )  # fmt: skip
            self._payment_update({"message": copy.deepcopy(message.raw)})
        return True
