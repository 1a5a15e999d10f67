"""The real process beside the floor: CPU per answered turn, start-up, memory.

``python -m bot`` and two floors run as child processes: the floor (``bench/floor.py``:
long poll, one streamed completion, one reply, one Redis pipeline, no framework) and the
SDK floor (``bench/floor_sdk.py``: the same job through aiogram and the openai SDK, used
plainly; what those two libraries cost by themselves is its gap to the floor). All run
against the same loopback servers: each its own ``tests/fakes/telegram.py`` (one poller
per server), one ``tests/fakes/model.py`` with an instant model (the reply streamed in
8-character chunks without delay), one real redis-server. The test servers run in this
process; each child's CPU is read from ``/proc/<pid>/task/*/schedstat`` (its threads'
time on a CPU).

CPU per answered turn, for four workloads: private chats (drafts) and a group (edits),
each with short chains (a new conversation every third message) and with a 200-message
chain (every message replies to the same answer at that depth: branches, so the depth
stays). Messages go out in bursts of ``BURST`` at once; a sample is ``ROUNDS`` bursts,
every answer on screen, then the child idle again. Samples of the bot and the floors
alternate, ``RUNS`` of each; the table shows medians. Turns/s per core is 1 / CPU per turn.

Start-up: launch to the first getUpdates, beside ``python -c "import aiogram"`` (the
framework's own import, the floor DESIGN.md states it against) and the floors'; with
``--full`` also the bot against a partial Bot API server whose set-up methods fail (404
and 500).

Memory: RSS after ``CONVERSATIONS`` conversations of 2 turns (in ``BURST`` private chats),
beside ``import aiogram``'s RSS; the target counts the transcript LRU's bytes in use
(read from ``/metrics``, so this one run has METRICS_LISTEN set).
"""

from __future__ import annotations

import asyncio
import compileall
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import aiohttp
from redis.asyncio import Redis

from tests.fakes.model import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.harness import ROOT, answers_to, env_for
from tests.redis_server import free_port

from .common import median, progress, redis_server, sized, table
from .load_bench import TimedTelegram

#: Messages sent at once (each in its own private chat, or by its own user in the group).
BURST = 10
#: Bursts per sample (quick: 3).
ROUNDS = 10
#: Samples of each child per workload (quick: 3).
RUNS = 5
#: The long chain's length before the measured turns.
CHAIN = 200
#: Launches of each command for start-up (quick: 3).
STARTUP_RUNS = 5
#: Conversations of 2 turns before RSS is read (quick: 200).
CONVERSATIONS = 1000
#: The model's reply: a little Markdown, ending in a word that marks it whole on screen.
REPLY = (
    "Sure. Here is **the** answer, with `code` and a list:\n\n- one\n- two\n\n"
    + "Some more words of explanation follow here. " * 4
    + "done."
)
QUESTION = "What about the next step, and the one after it?"
GROUP = -1001234
FIRST_USER = 2001
#: A child counts as idle when its CPU time has not moved for this long.
IDLE = 0.15


def cpu_seconds(pid: int) -> float:
    """CPU time of a process's threads, in seconds: the scheduler's nanosecond count
    (``/proc/<pid>/task/*/schedstat``; ``/proc/<pid>/stat`` counts 10 ms ticks, too
    coarse for a floor that spends about a millisecond a turn). The children keep their
    threads (event loop, executor workers) for their whole life."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(FileNotFoundError):
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
    return total / 1e9


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _append(path: Path) -> IO[bytes]:
    return path.open("ab")


def _errors(logs: Path) -> list[str]:
    """Lines of the children's output that show a failure."""
    return [
        line
        for log in logs.iterdir()
        for line in log.read_text(errors="replace").splitlines()
        if "Traceback" in line or " ERROR " in line
    ]


@dataclass
class Child:
    """``python -m bot`` or a floor as a child process, its output in a file."""

    name: str
    module: str
    tg: TimedTelegram
    env: dict[str, str]
    log: Path
    proc: asyncio.subprocess.Process | None = None
    #: The last answer of each long chain, by chat (the message the turns reply to).
    tips: dict[int, int] = field(default_factory=dict)
    #: Each short chain's last answer (None: the next message starts a new one).
    short: dict[tuple[int, int], int | None] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self) -> tuple[float, float]:
        """Launch; returns the seconds until its first getUpdates and its CPU seconds then."""
        polls = len(self.tg.polls_at)
        started = time.monotonic()
        with _append(self.log) as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", self.module,
                cwd=ROOT, env={**self.env, "PYTHONPATH": str(ROOT)},
                stdout=log, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
        await self.tg.wait_for(lambda: len(self.tg.polls_at) > polls, 120, what=self.name)
        return self.tg.polls_at[polls] - started, cpu_seconds(self.pid)

    async def stop(self) -> float:
        """SIGTERM; returns the seconds until it exited (``inf``: killed after 30 s)."""
        proc, self.proc = self.proc, None
        if proc is None or proc.returncode is not None:
            return 0.0
        started = time.monotonic()
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return float("inf")
        return time.monotonic() - started

    def calls_before_poll(self) -> list[str]:
        """The Bot API methods called before the first getUpdates."""
        first = self.tg.polls_at[0]
        return [c.method for c in self.tg.calls if c.at < first]

    async def idle(self) -> None:
        """Wait until the child's CPU time stops moving (its last writes are done)."""
        last, still = cpu_seconds(self.pid), time.monotonic()
        deadline = still + 5.0
        while time.monotonic() - still < IDLE and time.monotonic() < deadline:
            await asyncio.sleep(0.03)
            now = cpu_seconds(self.pid)
            if now != last:
                last, still = now, time.monotonic()


def _answered(tg: FakeTelegram, chat: int, message: int) -> int | None:
    """The id of the answer's last part once it is on screen whole, else None."""
    parts = answers_to(tg, chat, message)
    if parts and (parts[-1].text or "").endswith("done."):
        return parts[-1].message_id
    return None


async def _burst(child: Child, sends: Sequence[tuple[int, int, int | None, str]]) -> list[int]:
    """Send (chat, user, reply_to, text) at once; wait until all are answered; the answers."""
    tg = child.tg
    asked = [
        (chat, tg.send_user_message(chat, user, text, reply_to=reply)["message_id"])
        for chat, user, reply, text in sends
    ]
    await tg.wait_for(lambda: all(_answered(tg, c, m) for c, m in asked), 120, what=child.name)
    return [_answered(tg, c, m) or 0 for c, m in asked]


def _senders(kind: str) -> list[tuple[int, int]]:
    """(chat, user) of the burst's messages: a private chat each, or users of the group."""
    users = range(FIRST_USER, FIRST_USER + BURST)
    return [(u, u) for u in users] if kind == "private" else [(GROUP, u) for u in users]


async def _short_round(child: Child, kind: str, *, new: bool) -> None:
    """Every sender continues its short chain, or starts a new one."""
    sends = []
    for chat, user in _senders(kind):
        reply = None if new else child.short.get((chat, user))
        text = QUESTION if reply or kind == "private" else f"@{child.tg.username} {QUESTION}"
        sends.append((chat, user, reply, text))
    for (chat, user), answer in zip(_senders(kind), await _burst(child, sends), strict=True):
        child.short[(chat, user)] = answer


async def _long_round(child: Child, kind: str) -> None:
    """Every sender replies to the same answer at depth CHAIN (branches)."""
    chat = _senders(kind)[0][0]
    tip = child.tips[chat]
    senders = _senders(kind) if kind == "group" else [(chat, chat)] * BURST
    await _burst(child, [(c, u, tip, QUESTION) for c, u in senders])


async def _grow(child: Child, kind: str) -> None:
    """The long chain of ``kind``'s chat, one exchange at a time, to CHAIN messages."""
    chat, user = _senders(kind)[0]
    reply: int | None = None
    for depth in range(2, CHAIN + 1, 2):
        text = QUESTION if reply or kind == "private" else f"@{child.tg.username} {QUESTION}"
        [reply] = await _burst(child, [(chat, user, reply, f"{text} ({depth})")])
    assert reply is not None
    child.tips[chat] = reply


async def _sample(child: Child, kind: str, chain: str, *, rounds: int, start: int) -> float:
    """CPU seconds per answered turn over ``rounds`` bursts."""
    await child.idle()
    before = cpu_seconds(child.pid)
    for index in range(rounds):
        if chain == "short":
            await _short_round(child, kind, new=(start + index) % 3 == 0)
        else:
            await _long_round(child, kind)
    await child.idle()
    return (cpu_seconds(child.pid) - before) / (rounds * BURST)


WORKLOADS = (
    ("private chats, short chains", "private", "short"),
    ("private chat, 200-message chain", "private", "long"),
    ("group, short chains", "group", "short"),
    ("group, 200-message chain", "group", "long"),
)


#: (name, module) of the children: the bot first, then the floors.
CHILDREN = (
    ("python -m bot", "bot"),
    ("floor", "bench.floor"),
    ("sdk floor", "bench.floor_sdk"),
)


def _add_chats(tg: FakeTelegram) -> None:
    tg.add_group(GROUP, "Bench group")
    for user in range(FIRST_USER, FIRST_USER + BURST):
        tg.add_private_chat(user, f"U{user}")


@contextlib.asynccontextmanager
async def _children(
    llm: FakeOpenAI,
    redis_url: str,
    logs: Path,
    which: Sequence[tuple[str, str]] = CHILDREN,
    **extra: str,
) -> AsyncIterator[list[Child]]:
    """The bot and the floors (``which``: :data:`CHILDREN`, in its order), each with its
    own Bot API server and its own Redis database (two bots would share an intake),
    all polling."""
    children: list[Child] = []
    server = redis_url.rsplit("/", 1)[0]
    async with contextlib.AsyncExitStack() as stack:
        for database, (name, module) in enumerate(which):
            tg = TimedTelegram()
            await stack.enter_async_context(tg)
            _add_chats(tg)
            url = f"{server}/{database}"
            env = env_for(tg, llm, url, LOG_LEVEL="WARNING", **extra)
            children.append(Child(name, module, tg, env, logs / f"{module}.log"))
        try:
            for child in children:
                await child.start()
            yield children
        finally:
            for child in children:
                await child.stop()


def _model() -> FakeOpenAI:
    llm = FakeOpenAI()
    llm.responder = lambda _messages: REPLY
    return llm


async def workloads(
    redis_url: str, logs: Path, which: Sequence[tuple[str, str]], *, runs: int, rounds: int
) -> list[tuple[str, list[float]]]:
    """(workload, the median CPU seconds per answered turn of each child of ``which``) for
    each of :data:`WORKLOADS`, the children's samples interleaved."""
    results = []
    async with _model() as llm, _children(llm, redis_url, logs, which) as children:
        for child in children:
            for kind in ("private", "group"):
                progress(f"process: {child.name} grows a {CHAIN}-message {kind} chain")
                await _grow(child, kind)
            for kind in ("private", "group"):  # warm up: connections, caches, first imports
                await _short_round(child, kind, new=True)
        for label, kind, chain in WORKLOADS:
            progress(f"process: {label}")
            spent: dict[str, list[float]] = {child.name: [] for child in children}
            for run in range(runs):
                for child in children:
                    sample = _sample(child, kind, chain, rounds=rounds, start=1 + run * rounds)
                    spent[child.name].append(await sample)
            results.append((label, [median(spent[child.name]) for child in children]))
    return results


async def cpu_per_turn(redis_url: str, logs: Path) -> str:
    runs, rounds = sized(3, RUNS), sized(3, ROUNDS)
    rows: list[list[object]] = []
    for label, (bot, floor, sdk) in await workloads(
        redis_url, logs, CHILDREN, runs=runs, rounds=rounds
    ):
        ratios = [f"{a / b:.1f}x" for a, b in ((bot, floor), (bot, sdk), (sdk, floor))]
        rows.append(
            [label, bot * 1e3, floor * 1e3, sdk * 1e3, *ratios, 1 / bot, 1 / floor, 1 / sdk]
        )
    return table(
        f"CPU per answered turn, python -m bot beside the floor and the SDK floor (instant "
        f"model; bursts of {BURST}, {rounds} bursts a sample, median of {runs} interleaved "
        "samples; target: bot/floor <= 2x)",
        [
            "workload",
            "bot ms",
            "floor ms",
            "sdk ms",
            "bot/floor",
            "bot/sdk",
            "sdk/floor",
            "bot turns/s/core",
            "floor turns/s/core",
            "sdk turns/s/core",
        ],
        rows,
    )


async def _import_aiogram() -> tuple[float, float, int]:
    """(seconds, CPU seconds, RSS bytes) of ``python -c "import aiogram"``."""
    source = (
        "import aiogram, time\n"
        "rss = [l for l in open('/proc/self/status') if l.startswith('VmRSS')][0].split()[1]\n"
        "print(time.process_time(), rss)"
    )
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", source, cwd=ROOT, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    took = time.monotonic() - started
    cpu, rss = out.split()
    return took, float(cpu), int(rss) * 1024


async def start_up(redis_url: str, logs: Path) -> str:
    runs = sized(3, STARTUP_RUNS)
    aiogram = 'python -c "import aiogram"'
    #: command -> (seconds to the first poll, CPU seconds then, seconds from SIGTERM to exit)
    times: dict[str, list[tuple[float, float, float]]] = {aiogram: []}
    before: dict[str, list[str]] = {}
    partial = "python -m bot, set-up methods failing (404, 500)"
    async with _model() as llm:
        for run in range(runs):
            progress(f"process: start-up, run {run + 1} of {runs}")
            took, cpu, _rss = await _import_aiogram()
            times[aiogram].append((took, cpu, 0.0))
            launches = [(name, module, False) for name, module in CHILDREN]
            if sized(False, True):  # the quick run leaves it to the tests (test_sloppy_servers)
                launches.append((partial, "bot", True))
            for name, module, failing in launches:
                tg = TimedTelegram()
                if failing:
                    tg.unsupported_methods = {"setMyCommands", "getMyCommands"}
                    tg.fail_next("deleteWebhook", status=500, count=100)
                await _flush(redis_url)
                async with tg:
                    env = env_for(tg, llm, redis_url, LOG_LEVEL="WARNING")
                    child = Child(name, module, tg, env, logs / "start-up.log")
                    try:
                        polled, cpu = await child.start()
                        before[name] = child.calls_before_poll()
                    finally:
                        exited = await child.stop()
                times.setdefault(name, []).append((polled, cpu, exited))
    floor = median([t[0] for t in times[aiogram]])
    rows = []
    for name, values in times.items():
        wall = [t[0] for t in values]
        cpu = median([t[1] for t in values])
        exit_s = median([t[2] for t in values]) if name in before else "-"
        rows.append([name, median(wall), min(wall), max(wall), median(wall) - floor, cpu, exit_s])
    calls = "".join(f"\n  {name}: {', '.join(m) or 'none'}" for name, m in before.items())
    return (
        table(
            f"Start-up: launch to the first getUpdates (seconds, {runs} interleaved runs; "
            'target: python -m bot <= "import aiogram" + 0.5 s)',
            ["command", "median", "min", "max", "beyond import aiogram", "CPU s", "SIGTERM->exit"],
            rows,
        )
        + f"Bot API calls before the first getUpdates (last run):{calls}\n"
    )


async def _cache_bytes(port: int) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        text = await response.text()
    for line in text.splitlines():
        if line.startswith("replychain_transcript_cache_bytes "):
            return int(float(line.split()[1]))
    raise RuntimeError("no replychain_transcript_cache_bytes in /metrics")


async def memory(redis_url: str, logs: Path) -> str:
    conversations = sized(200, CONVERSATIONS)
    port = free_port()
    rows: list[list[object]] = []
    _took, _cpu, aiogram = await _import_aiogram()
    rows.append(['python -c "import aiogram"', aiogram / 2**20, "-", "-"])
    async with (
        _model() as llm,
        _children(llm, redis_url, logs, METRICS_LISTEN=f"127.0.0.1:{port}") as children,
    ):
        for child in children:
            started = rss_bytes(child.pid)
            progress(f"process: {child.name}, {conversations} conversations of 2 turns")
            for index in range(2 * conversations // BURST):
                await _short_round(child, "private", new=index % 2 == 0)
            rows.append([child.name, started / 2**20, rss_bytes(child.pid) / 2**20, ""])
        lru = await _cache_bytes(port)
    bot_rss = rows[1][2]
    assert isinstance(bot_rss, float)
    budget = aiogram / 2**20 + 30 + lru / 2**20
    rows[1][3] = f"{lru / 2**20:.1f} MB LRU; target <= {budget:.1f} MB"
    return table(
        f"RSS (MB) after {conversations} conversations of 2 turns (target: <= import aiogram "
        "+ 30 MB + the transcript LRU's bytes; METRICS_LISTEN is set to read the LRU)",
        ["process", "after start", f"after {conversations}", "note"],
        rows,
    )


async def _flush(redis_url: str) -> None:
    """A fresh Redis for each part: the test servers number messages from 1 again."""
    redis = Redis.from_url(redis_url)
    try:
        await redis.flushall()
    finally:
        await redis.aclose()


PARTS = (cpu_per_turn, start_up, memory)


def _compile() -> None:
    """Bytecode for the children's own modules, as an install has it: with
    PYTHONDONTWRITEBYTECODE set (as here) every launch would compile the project from
    source (about 0.4 s), while aiogram's import reads its installed bytecode."""
    for package in ("bot", "transcript", "bench"):
        compileall.compile_dir(ROOT / package, quiet=1)


async def run() -> str:
    _compile()
    parts = []
    with redis_server() as server, tempfile.TemporaryDirectory(prefix="rc-process-") as tmp:
        logs = Path(tmp)
        for part in PARTS:
            await _flush(server.url)
            parts.append(await part(server.url, logs))
        errors = _errors(logs)
    if errors:
        parts.append(f"errors in the children's output ({len(errors)}), e.g. {errors[0]}\n")
    return "\n".join(parts)
