"""``python -m bot``: start replychain with settings from the environment and .env.

Settings are checked before anything heavy (aiogram, openai, redis) is imported,
so a missing or invalid setting is reported in one line at once. ``--help`` lists
the settings and exit codes. Commands are subcommands; ``run`` is the default.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable

from .settings import Settings, SettingsError
from .settings_help import SETTINGS_HELP
from .settings_load import describe_value, load_settings

#: Exit codes, as ``--help`` lists them.
EXIT_OK = 0
EXIT_STARTUP = 1
EXIT_SETTINGS = 2

DESCRIPTION = """\
replychain: a self-hosted Telegram chat bot for any OpenAI-compatible model, in
which every Telegram reply chain is its own conversation (stored in Redis).

Settings are read from the environment and from .env in the working directory
(the environment wins); an empty value counts as not set. See README.md for more."""

EXIT_CODES = f"""\
exit codes:
  {EXIT_OK}  stopped cleanly (SIGTERM or SIGINT), or a command finished
  {EXIT_STARTUP}  start-up failed: Telegram, Redis or the model refused, Redis holds an
      unknown key layout, or Telegram or Redis stayed unreachable for 20 s
  {EXIT_SETTINGS}  a setting is missing or invalid (one line names it), or bad usage"""


def _settings_list() -> str:
    width = max(len(name) for name in SETTINGS_HELP) + 2
    lines = [f"  {name.ljust(width)}{text}" for name, text in SETTINGS_HELP.items()]
    return "settings (environment variables, also read from .env):\n" + "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The command line: ``python -m bot [command]``; no command runs the bot."""
    parser = argparse.ArgumentParser(
        prog="python -m bot",
        usage="%(prog)s [-h] [command]",
        description=DESCRIPTION,
        epilog=f"{_settings_list()}\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", title="commands (default: run)")
    commands.add_parser(
        "run",
        help="run the bot (the default)",
        description="Run the bot until SIGTERM or SIGINT.",
    )
    check = commands.add_parser(
        "check-config",
        help="check the settings and exit (0: fine, 2: one line says what is wrong)",
        description="Load and check the settings without starting anything.",
    )
    check.add_argument(
        "--redis-mode",
        action="store_true",
        help="print only 'local' (REDIS_URL not set: `make run` starts a local "
        "redis-server) or 'external'",
    )
    letters = commands.add_parser(
        "dead-letters",
        help="list the messages given up after TURN_MAX_ATTEMPTS failures, or replay them",
        description="List the parked messages (the dead-letter stream rc:deadletter): chat, "
        "message id, when, and the type of the error. With --replay, put them back into "
        "the intake; a running bot answers them (fix the cause first).",
    )
    letters.add_argument("--replay", action="store_true", help="put every parked message back")
    _add_operator_commands(commands)
    return parser


def _add_operator_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``doctor``, ``export``, ``tree``, ``why``: the operator's checks and reads (bot/ops)."""
    doctor = commands.add_parser(
        "doctor",
        prog="python -m bot doctor",
        help="check the set-up: settings, Telegram, Redis, the model endpoint",
        description="Check everything the bot needs, one line each with ✓ (fine), ⚠ (the bot "
        "runs, but fix this) or ✗ (the bot cannot run) and the fix: the settings; Telegram "
        "(getMe with the token, the webhook state); Redis (reachable, version, key layout, "
        "persistence, maxmemory-policy); the model endpoint (its model list holds OPENAI_MODEL). "
        "Exit 0 when the bot can run, 1 when not, 2 for a setting.",
    )
    doctor.add_argument(
        "--call", action="store_true", help="also make a one-token model call (costs a token)"
    )
    reads = {
        "export": (
            "print a thread from its root to a message as Markdown",
            "Print the thread holding MESSAGE_ID, from its root (the system prompt) to that "
            "message, as Markdown: one heading per message, this branch only, the full history "
            "(summaries made for the model are not part of it).",
        ),
        "tree": (
            "show the conversation tree around a message",
            "Show the conversation tree holding MESSAGE_ID: one line per stored message with "
            "its depth, first words, a message id to reply to and the number of messages "
            "below it; branches are indented and the given message is marked.",
        ),
        "why": (
            "show what the model was sent for an answer, and what came back",
            "For an answer message: the model calls behind it from the audit records (model, "
            "time, usage with the cached share, latency, the fold used) and the request as it "
            "was rendered (system prompt, fold summary, verbatim messages), rebuilt from the "
            "stored nodes. Audit records are kept MODEL_AUDIT_DAYS days.",
        ),
    }
    for name, (short, long) in reads.items():
        read = commands.add_parser(name, prog=f"python -m bot {name}", help=short, description=long)
        read.add_argument("chat_id", type=int, metavar="CHAT_ID", help="the Telegram chat id")
        read.add_argument(
            "message_id", type=int, metavar="MESSAGE_ID", help="a message id in that chat"
        )
    _add_payment_commands(commands)


def _add_payment_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``payments``, ``refund``: Telegram Stars payments and credit (bot/ops/payments.py)."""
    payments = commands.add_parser(
        "payments",
        prog="python -m bot payments",
        help="list the Stars payments, or one user's payments and credit",
        description="Print the Stars received and refunded and the last payments (time, "
        "charge id, user, Stars, the credit added, a refund); with --user, that user's "
        "credit (credited, refunded, spent, written off), today's free allowance left and "
        "their last payments.",
    )
    payments.add_argument("--user", type=int, metavar="USER_ID", help="one Telegram user id")
    refund = commands.add_parser(
        "refund",
        prog="python -m bot refund",
        help="refund a Stars payment and take back the credit it added",
        description="Give the Stars of a payment back (refundStarPayment) and take the credit "
        "it added back from the user's credit, never below zero. A payment whose credit was "
        "spent is refused unless --force. Running it again is safe: a refund done is "
        "reported, one interrupted goes on. Exit 1 when nothing was refunded.",
    )
    refund.add_argument(
        "charge_id", metavar="CHARGE_ID", help="the payment's telegram_payment_charge_id"
    )
    refund.add_argument(
        "--force",
        action="store_true",
        help="refund even when the credit it added was spent (the credit goes to zero)",
    )


def _load() -> Settings | None:
    try:
        return load_settings()
    except SettingsError as exc:
        print(f"replychain: {exc}", file=sys.stderr)
        return None


def _exit_cleanly(_signum: int, _frame: object) -> None:
    # Not SystemExit: raised inside an import (aiogram builds its models in pydantic's
    # Rust core), it surfaces as a traceback. Nothing runs yet, so nothing is lost.
    os._exit(EXIT_OK)


def cmd_run(args: argparse.Namespace) -> int:
    settings = _load()
    if settings is None:
        return EXIT_SETTINGS
    from .logs import configure_logging  # noqa: PLC0415

    configure_logging(settings)
    # Imported only now: aiogram alone takes seconds to import, and a settings
    # error must not wait for it.
    from .app import run  # noqa: PLC0415
    from .app_startup import StartupError  # noqa: PLC0415

    try:
        return asyncio.run(run(settings))
    except StartupError as exc:
        print(f"replychain: {exc}", file=sys.stderr)
        return EXIT_STARTUP
    except KeyboardInterrupt:
        return EXIT_OK


def cmd_check_config(args: argparse.Namespace) -> int:
    settings = _load()
    if settings is None:
        return EXIT_SETTINGS
    if args.redis_mode:
        print("external" if settings.redis_url_is_set else "local")
        return EXIT_OK
    print("replychain: settings are fine")
    for name in SETTINGS_HELP:
        field = name.lower()
        if field in settings.model_fields_set:
            print(f"  {name}={describe_value(getattr(settings, field))}")
    return EXIT_OK


def cmd_dead_letters(args: argparse.Namespace) -> int:
    settings = _load()
    if settings is None:
        return EXIT_SETTINGS
    from .bus.intake import Intake  # noqa: PLC0415
    from .data.connection import connect  # noqa: PLC0415
    from .data.layout import UnknownLayoutError, check_layout  # noqa: PLC0415

    async def run() -> int:
        redis = connect(settings.redis_url, cluster=settings.redis_cluster)
        try:
            await check_layout(redis, claim=False)
            intake = Intake(redis, settings.bot_instance, shards=settings.intake_shards)
            if args.replay:
                moved = await intake.replay_parked()
                print(f"replychain: put {moved} parked message(s) back into the intake")
                return EXIT_OK
            parked = await intake.parked()
            print(f"replychain: {len(parked)} parked message(s)")
            for entry_id, inbound, why, at in parked:
                when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))
                where = (
                    f"chat {inbound.chat_id} message {inbound.message_id}"
                    if inbound
                    else "an entry that does not decode"
                )
                print(f"  {entry_id.decode()}  {when}  {where}: {why}")
            return EXIT_OK
        finally:
            await redis.aclose()

    from transcript import StoreUnavailableError  # noqa: PLC0415

    try:
        return asyncio.run(run())
    except StoreUnavailableError as exc:
        print(f"replychain: {exc}; check REDIS_URL", file=sys.stderr)
        return EXIT_STARTUP
    except UnknownLayoutError as exc:
        print(f"replychain: {exc}", file=sys.stderr)
        return EXIT_STARTUP


def cmd_doctor(args: argparse.Namespace) -> int:
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"✗ settings: {exc}")
        return EXIT_SETTINGS
    from .ops.doctor import run_doctor  # noqa: PLC0415

    return run_doctor(settings, call=args.call)


def cmd_read(args: argparse.Namespace) -> int:
    """``export``, ``tree`` and ``why`` of one message of one chat."""
    settings = _load()
    if settings is None:
        return EXIT_SETTINGS
    from .ops import read_thread  # noqa: PLC0415

    return read_thread(args.command, settings, args.chat_id, args.message_id)


def cmd_payments(args: argparse.Namespace) -> int:
    settings = _load()
    if settings is None:
        return EXIT_SETTINGS
    from .ops.payments import list_payments  # noqa: PLC0415

    return list_payments(settings, args.user)


def cmd_refund(args: argparse.Namespace) -> int:
    settings = _load()
    if settings is None:
        return EXIT_SETTINGS
    from .ops.payments import refund  # noqa: PLC0415

    return refund(settings, args.charge_id, force=args.force)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": cmd_run,
    "check-config": cmd_check_config,
    "dead-letters": cmd_dead_letters,
    "doctor": cmd_doctor,
    "export": cmd_read,
    "tree": cmd_read,
    "why": cmd_read,
    "payments": cmd_payments,
    "refund": cmd_refund,
}


def main(argv: list[str] | None = None) -> int:
    # Until the bot installs its own handlers, SIGTERM/SIGINT end start-up cleanly:
    # nothing is running yet, so nothing can be lost.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_cleanly)
    args = build_parser().parse_args(argv)
    return COMMANDS[args.command or "run"](args)


if __name__ == "__main__":
    sys.exit(main())
