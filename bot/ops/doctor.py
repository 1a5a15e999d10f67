"""``python -m bot doctor``: check a set-up before going live, one line per check.

Each line starts with ✓ (fine), ⚠ (the bot runs, but fix this) or ✗ (the bot
cannot run), names the variable at fault and says how to fix it. The three
edges are checked at once: Telegram (getMe with the token, the webhook state),
Redis (reachable, version, key layout, persistence, eviction policy) and the model
endpoint (its model list, and with ``--call`` a one-token completion).
Every line is scrubbed of the token, the model key and the Redis password
before it is printed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from ..settings import Settings
from ..settings_load import describe_value
from .doctor_redis import check_redis
from .doctor_report import CHECK_TIMEOUT, FAIL, OK, WARN, Report


def secrets_of(settings: Settings) -> list[str]:
    """Everything that must never be printed: the token, the key, a Redis password."""
    found = [settings.telegram_bot_token.get_secret_value()]
    found.append(found[0].partition(":")[2])
    if settings.openai_api_key is not None:
        found.append(settings.openai_api_key.get_secret_value())
    for url in (settings.redis_url, settings.openai_base_url, settings.telegram_api_url):
        try:
            password = urlsplit(url).password if url else None
        except ValueError:
            password = None
        if password:
            found.append(password)
    return sorted((s for s in found if len(s) >= 4), key=len, reverse=True)


def scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "<redacted>")
    return " ".join(text.split())  # one line


def _endpoint(settings: Settings) -> str:
    if not settings.openai_base_url:
        return "OpenAI (OPENAI_BASE_URL not set)"
    return describe_value(settings.openai_base_url)


async def _bounded(what: str, report: Report, check: Callable[[Report], Awaitable[None]]) -> None:
    """Run one check; a hang or a surprise is one ✗ line, never a traceback."""
    try:
        await asyncio.wait_for(check(report), CHECK_TIMEOUT * 2)
    except TimeoutError:
        report.fail(what, f"no answer within {CHECK_TIMEOUT * 2:.0f} s")
    except Exception as exc:
        report.fail(what, f"the check failed unexpectedly ({type(exc).__name__})")


# ------------------------------------------------------------------- Telegram


async def check_telegram(settings: Settings, report: Report) -> None:
    from aiogram import Bot  # noqa: PLC0415
    from aiogram.client.telegram import TelegramAPIServer  # noqa: PLC0415
    from aiogram.exceptions import (  # noqa: PLC0415
        TelegramAPIError,
        TelegramNetworkError,
        TelegramNotFound,
        TelegramUnauthorizedError,
    )

    from ..telegram.session import BotApiSession  # noqa: PLC0415

    server = settings.telegram_api_url
    session = BotApiSession(api=TelegramAPIServer.from_base(server), timeout=CHECK_TIMEOUT)
    try:
        bot = Bot(settings.telegram_bot_token.get_secret_value(), session=session)
        try:
            me = await bot.get_me()
        except TelegramUnauthorizedError:
            report.fail(
                "Telegram",
                "TELEGRAM_BOT_TOKEN was rejected (401 Unauthorized): copy the token again "
                "from @BotFather (https://t.me/BotFather) into .env",
            )
            return
        except TelegramNotFound:
            report.fail(
                "Telegram",
                f"the Bot API at {server} does not know this token (404): check "
                "TELEGRAM_BOT_TOKEN, and TELEGRAM_API_URL if you run your own Bot API server",
            )
            return
        except TelegramNetworkError as exc:
            report.fail(
                "Telegram",
                f"cannot reach the Bot API at {server} ({exc.message}): check "
                "TELEGRAM_API_URL and the network",
            )
            return
        except TelegramAPIError as exc:
            report.fail(
                "Telegram",
                f"the Bot API at {server} answered getMe with an error ({exc.message}): "
                "check TELEGRAM_API_URL",
            )
            return
        report.ok("Telegram", f"@{me.username} (bot id {me.id}) at {server}")
        _guest_mode(settings, me.username or "", me.supports_guest_queries, report)
        try:
            info = await bot.get_webhook_info()
        except TelegramAPIError as exc:
            report.warn("Telegram webhook", f"getWebhookInfo failed ({exc.message})")
            return
        if info.url:
            host = urlsplit(info.url).hostname or "an URL"
            report.warn(
                "Telegram webhook",
                f"a webhook is set (to {host}, {info.pending_update_count} update(s) waiting) "
                "while the bot uses long polling: the bot deletes it when it starts; if "
                "another program still receives this bot's updates through it, stop that one",
            )
        else:
            report.ok(
                "Telegram webhook",
                f"none set: the bot polls ({info.pending_update_count} update(s) waiting)",
            )
    finally:
        await session.close()


def _guest_mode(settings: Settings, username: str, supported: bool | None, report: Report) -> None:
    """Guest mode (Bot API 10.0): getMe's ``supports_guest_queries`` beside GUEST_MODE."""
    if not settings.guest_mode:
        report.ok("guest mode", "GUEST_MODE=false: mentions in chats the bot is not in are ignored")
    elif supported:
        report.ok("guest mode", f"on: @{username} answers where it is mentioned, even in chats "
                  "it is not in")  # fmt: skip
    else:
        report.warn(
            "guest mode",
            f"off for @{username} (getMe: supports_guest_queries is not set): to be "
            "summoned in chats it is not in, open @BotFather, choose the bot (/mybots) and "
            "turn guest mode on in its Bot Settings; or set GUEST_MODE=false",
        )


# ---------------------------------------------------------------------- model


def _short(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or getattr(exc, "message", None) or type(exc).__name__)[:200]


async def check_model(settings: Settings, report: Report, *, call: bool) -> None:
    import openai  # noqa: PLC0415

    where, model = _endpoint(settings), settings.openai_model
    client = openai.AsyncOpenAI(
        api_key=settings.api_key(),
        base_url=settings.openai_base_url,
        timeout=min(settings.openai_timeout, CHECK_TIMEOUT),
        max_retries=0,
    )
    try:
        try:
            listed = [m.id async for m in client.models.list()]
        except openai.AuthenticationError:
            report.fail(
                "model", f"OPENAI_API_KEY was rejected (401) by {where}: put a valid key in .env"
            )
            return
        except (openai.NotFoundError, openai.PermissionDeniedError) as exc:
            report.warn(
                "model",
                f"{where} does not list its models ({exc.status_code}): OPENAI_MODEL={model} "
                "not checked; `python -m bot doctor --call` tries a one-token call",
            )
            listed = None
        except openai.APIConnectionError as exc:
            report.fail(
                "model",
                f"cannot reach the model endpoint {where} ({type(exc).__name__}): check "
                "OPENAI_BASE_URL and that the server runs",
            )
            return
        except openai.APIStatusError as exc:
            report.fail(
                "model",
                f"{where} answered {exc.status_code} to a model list ({_short(exc)}): "
                "check OPENAI_BASE_URL",
            )
            return
        if listed is not None:
            if model in listed:
                report.ok("model", f"{model} at {where} ({len(listed)} model(s) listed)")
            elif not listed:
                report.warn("model", f"{where} lists no models: OPENAI_MODEL={model} not checked")
            else:
                shown = ", ".join(sorted(listed)[:8]) + (", …" if len(listed) > 8 else "")
                report.fail(
                    "model",
                    f"OPENAI_MODEL={model} is not among the {len(listed)} model(s) {where} "
                    f"lists ({shown}): set OPENAI_MODEL to one of them",
                )
                return
        if call:
            await _one_token_call(client, where, model, report)
    finally:
        await client.close()


async def _one_token_call(client: Any, where: str, model: str, report: Report) -> None:
    import openai  # noqa: PLC0415

    started = time.monotonic()
    try:
        await client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Say OK."}], max_tokens=1
        )
    except openai.AuthenticationError:
        report.fail("model call", f"OPENAI_API_KEY was rejected (401) by {where}")
    except openai.NotFoundError:
        report.fail("model call", f"{where} does not know OPENAI_MODEL={model} (404)")
    except openai.RateLimitError as exc:
        report.fail(
            "model call", f"rate limited or out of quota (429: {_short(exc)}): check the account"
        )
    except openai.APIConnectionError as exc:
        report.fail("model call", f"{where} did not answer ({type(exc).__name__})")
    except openai.APIStatusError as exc:
        report.fail(
            "model call",
            f"{where} refused a one-token call ({exc.status_code}: {_short(exc)}): "
            "check OPENAI_MODEL",
        )
    else:
        took = time.monotonic() - started
        report.ok("model call", f"{model} answered a one-token request in {took:.1f} s")


# ----------------------------------------------------------------------- tools


async def check_tools(settings: Settings, report: Report) -> None:
    """Each MCP server of MCP_CONFIG started and listed; one that fails is a warning."""
    from ..tools.config import load_config  # noqa: PLC0415 - only with MCP_CONFIG
    from ..tools.hub import ToolHub  # noqa: PLC0415

    assert settings.mcp_config is not None
    hub = ToolHub(load_config(settings.mcp_config), allowed=settings.allowed_tools)
    try:
        await hub.start()
        for name in hub.servers:
            count = sum(1 for t in hub.tools.values() if t.server == name)
            report.ok(f"tool server {name}", f"{count} tool(s) offered")
        for name, why in hub.failures.items():
            report.warn(
                f"tool server {name}",
                f"failed to start ({why}); the bot runs without its tools: fix MCP_CONFIG",
            )
    finally:
        await hub.close()


# ----------------------------------------------------------------------- all


async def doctor(settings: Settings, *, call: bool = False) -> tuple[list[str], bool]:
    """Every check's lines (scrubbed of secrets) and whether the bot can run."""
    first = Report()
    first.ok(
        "settings",
        f"loaded (Telegram at {settings.telegram_api_url}, model {settings.openai_model} at "
        f"{_endpoint(settings)}, Redis at {settings.redis_location})",
    )
    telegram, redis, model, tools = Report(), Report(), Report(), Report()

    async def model_check(report: Report) -> None:
        await check_model(settings, report, call=call)

    await asyncio.gather(
        _bounded("Telegram", telegram, lambda r: check_telegram(settings, r)),
        _bounded("Redis", redis, lambda r: check_redis(settings, r)),
        _bounded("model", model, model_check),
        *(
            [_bounded("tools", tools, lambda r: check_tools(settings, r))]
            if settings.mcp_config is not None
            else []
        ),
    )
    secrets = secrets_of(settings)
    lines = [
        scrub(f"{mark} {what}: {text}", secrets)
        for report in (first, telegram, redis, model, tools)
        for mark, what, text in report.lines
    ]
    failed = any(r.failed for r in (telegram, redis, model))
    return lines, failed


def run_doctor(settings: Settings, *, call: bool = False) -> int:
    """Print the report; 0 when the bot can run, 1 when a check failed."""
    try:
        lines, failed = asyncio.run(doctor(settings, call=call))
    except KeyboardInterrupt:
        return 1
    except Exception as exc:  # one line, never a traceback
        print(f"✗ doctor: failed unexpectedly ({type(exc).__name__})")
        return 1
    print("\n".join(lines))
    if failed:
        print(f"{FAIL} the bot cannot run: fix the lines marked {FAIL}")
    else:
        warned = any(line.startswith(WARN) for line in lines)
        print(f"{OK} the bot can run" + (f" (see the lines marked {WARN})" if warned else ""))
    return 1 if failed else 0
