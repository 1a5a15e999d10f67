"""The deployments the chaos soak (``bench/soak.py``) runs the bot on, and their chaos.

* :class:`Fleet`: ``N`` ``python -m bot`` processes on one Redis, each with its own
  ``BOT_INSTANCE``; polling (one at a time, the poller lease) or webhook mode behind
  a round-robin proxy (``tests.test_webhook.round_robin``: each POST to the next
  process, 502 while it is down, so Telegram delivers the update again).
* :class:`SingleRedis`: one redis-server, restarted gracefully once and SIGKILLed once.
* :class:`ClusterRedis`: a Redis Cluster, 3 masters with a replica each and a short
  ``cluster-node-timeout``; a master is SIGKILLed (its replica is promoted) and
  started again later, when it rejoins as a replica. ``lossy``: before the kill the
  replica is stopped (SIGSTOP) and the master drops its link (``CLIENT KILL TYPE
  replica``); the master dies 0.2-0.8 s later and the replica goes on: what the master
  acknowledged meanwhile is lost.

What a failover can lose, and how it is measured: a master acknowledges a write
before its replica has it (asynchronous replication). Killed, its promoted replica
lacks the writes of that last moment, and the old master, started again, drops them
(it resyncs from the new master). :meth:`ClusterRedis.failover` reads the master's
replication offset right before the SIGKILL and the offset the replica had when it
was promoted (``second_repl_offset`` - 1); the difference is a lower bound on the
bytes of acknowledged writes lost (a write between the read and the kill is not seen).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.asyncio import Redis

from bot.bus.inbound import Inbound
from bot.data import keys
from bot.data.connection import connect
from tests.harness import BotProcess
from tests.redis_server import RedisCluster, RedisServer, free_port
from tests.test_webhook import round_robin

from .soak_check import Failover

#: The webhook URL the processes register (never reached: Telegram's deliveries go to
#: the proxy, ``FakeTelegram.webhook_target``) and its secret.
WEBHOOK_URL = "https://soak.example.org/tg/hook"
WEBHOOK_SECRET = "soak-webhook-Secret_0123456789"
#: Longest a failover may take before the soak gives up waiting for the promotion.
PROMOTION_TIMEOUT = 30.0


class LoggedBot(BotProcess):
    """``python -m bot`` whose output is copied line by line to a sink as it comes
    (the harness keeps it in a pipe until exit, which would stall a long run); each
    line is prefixed with ``<process>g<generation>``."""

    def __init__(
        self, env: dict[str, str], cwd: Path, sink: Callable[[str], None], prefix: str
    ) -> None:
        super().__init__(env, cwd)
        self.sink = sink
        self.prefix = prefix
        self._pump: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await super().start()
        assert self.proc is not None and self.proc.stdout is not None
        self._pump = asyncio.create_task(self._copy(self.proc.stdout))

    async def _copy(self, stream: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await stream.readline()
            except ValueError:  # a line longer than the reader's limit
                line = await stream.read(65536)
            if not line:
                return
            self.sink(f"{self.prefix} {line.decode(errors='replace').rstrip()}")

    async def wait(self, timeout: float = 30.0) -> int:  # noqa: ASYNC109
        assert self.proc is not None
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        if self._pump is not None:
            await self._pump
        return code

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


@dataclass
class Worker:
    """One bot process slot of the fleet (its name and port stay across restarts)."""

    index: int
    name: str  # BOT_INSTANCE
    port: int | None  # WEBHOOK_LISTEN's port (webhook mode)
    bot: LoggedBot | None = None
    generation: int = 0
    #: Down on purpose (killed, restart pending): the watchdog leaves it alone.
    down: bool = False

    @property
    def label(self) -> str:
        return f"p{self.index}g{self.generation}"


class Fleet:
    """The bot processes: started, killed and restarted one at a time."""

    def __init__(
        self,
        count: int,
        *,
        webhook: bool,
        env: Callable[[], dict[str, str]],
        cwd: Path,
        sink: Callable[[str], None],
    ) -> None:
        self.webhook = webhook
        self._env = env
        self.cwd = cwd
        self.sink = sink
        self.workers = [
            Worker(i, f"soak-{i}", free_port() if webhook else None) for i in range(count)
        ]
        self.lock = asyncio.Lock()  # one kill/restart at a time

    @contextlib.asynccontextmanager
    async def proxy(self) -> AsyncIterator[str | None]:
        """The round-robin proxy's webhook URL in webhook mode (None when polling)."""
        if not self.webhook:
            yield None
            return
        backends = [f"http://127.0.0.1:{w.port}" for w in self.workers]
        async with round_robin(backends) as url:
            yield url + "/tg/hook"

    async def start(self, worker: Worker) -> None:
        worker.generation += 1
        env = {**self._env(), "BOT_INSTANCE": worker.name}
        if worker.port is not None:
            env.update(
                WEBHOOK_URL=WEBHOOK_URL,
                WEBHOOK_SECRET=WEBHOOK_SECRET,
                WEBHOOK_LISTEN=f"127.0.0.1:{worker.port}",
            )
        bot = LoggedBot(env, self.cwd, self.sink, worker.label)
        await bot.start()
        worker.bot, worker.down = bot, False
        self.sink(
            f"{worker.label} SOAK bot {worker.name} generation {worker.generation} started "
            f"(pid {bot.proc and bot.proc.pid})"
        )

    async def kill(self, worker: Worker) -> None:
        assert worker.bot is not None
        worker.down = True
        await worker.bot.kill()
        self.sink(f"{worker.label} SOAK SIGKILL bot {worker.name}")

    def alive(self) -> list[Worker]:
        return [w for w in self.workers if w.bot is not None and w.bot.alive]

    async def stop(self, timeout: float) -> list[str]:  # noqa: ASYNC109
        """SIGTERM to every process; what went wrong, one line each."""
        notes: list[str] = []
        for worker in self.workers:
            bot = worker.bot
            if bot is None or not bot.alive:
                continue
            worker.down = True  # stopped on purpose: the watchdog must not start it again
            try:
                code = await bot.terminate(timeout=timeout)
                self.sink(f"{worker.label} SOAK bot exited with {code} after SIGTERM")
                if code != 0:
                    notes.append(f"{worker.name}: exit status {code} after SIGTERM")
            except TimeoutError:
                notes.append(f"{worker.name}: still running {timeout:.0f} s after SIGTERM (killed)")
                await bot.kill()
        return notes

    async def reap(self) -> None:
        for worker in self.workers:
            if worker.bot is not None and worker.bot.alive:
                await worker.bot.kill()


@dataclass(frozen=True)
class Held:
    """An intake entry a process holds unacknowledged: its turn, and how often it has
    been delivered so far (a takeover delivers it again)."""

    chat_id: int
    message_id: int
    entry_id: bytes
    delivered: int

    @property
    def key(self) -> tuple[int, int]:
        return (self.chat_id, self.message_id)


async def pending_turns(client: Redis, consumer: str) -> list[Held]:
    """Every intake entry ``consumer`` holds unacknowledged: the turns a process killed
    just now left unfinished."""
    found: list[Held] = []
    stream = keys.INTAKE_STREAM
    held: Any = await client.xpending_range(
        stream, keys.INTAKE_GROUP, "-", "+", 10_000, consumername=consumer
    )
    for entry in held or []:
        entry_id = entry["message_id"]
        entries: Any = await client.xrange(stream, entry_id, entry_id)
        for _id, fields in entries or []:
            raw = (fields or {}).get(b"m")
            inbound = Inbound.decode(raw) if isinstance(raw, bytes) else None
            if inbound is not None:
                found.append(
                    Held(inbound.chat_id, inbound.message_id, entry_id, entry["times_delivered"])
                )
    return found


async def redelivered(client: Redis, held: Held) -> bool:
    """Whether ``held``'s entry was delivered again (claimed by a process) or acknowledged
    since it was read."""
    pending: Any = await client.xpending_range(
        keys.INTAKE_STREAM, keys.INTAKE_GROUP, held.entry_id, held.entry_id, 1
    )
    return not pending or int(pending[0]["times_delivered"]) > held.delivered


class SingleRedis:
    """One redis-server (``appendfsync always``), restarted twice during the chaos."""

    cluster = False
    failovers: tuple[Failover, ...] = ()

    def __init__(self, run_dir: Path, sched: random.Random, chaos: float) -> None:
        self.server = RedisServer(run_dir / "redis")
        self.plan = [
            (chaos * sched.uniform(0.25, 0.4), False),
            (chaos * sched.uniform(0.6, 0.75), True),
        ]
        self.sched = sched
        self.restarts = 0
        #: (gone, back) of each restart, on the soak's clock.
        self.outages: list[tuple[float, float]] = []

    @property
    def url(self) -> str:
        return self.server.url

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop()

    def client(self) -> Redis:
        return connect(self.url)

    async def chaos(
        self,
        now: Callable[[], float],
        until: Callable[[float], Awaitable[None]],
        note: Callable[[str], None],
    ) -> None:
        for at, crash in self.plan:
            await until(at)
            down = self.sched.uniform(1, 5)
            note(f"SOAK redis {'SIGKILL' if crash else 'stop'}, down for {down:.1f}s")
            gone = now()
            await asyncio.to_thread(self.server.kill if crash else self.server.stop)
            await asyncio.sleep(down)
            await asyncio.to_thread(self.server.start_same_port)
            self.outages.append((gone, now()))
            self.restarts += 1
            note("SOAK redis started again")


class ClusterRedis:
    """A Redis Cluster of 3 masters with a replica each; masters are SIGKILLed at random."""

    cluster = True

    def __init__(
        self,
        run_dir: Path,
        sched: random.Random,
        chaos: float,
        *,
        node_timeout_ms: int = 1500,
        lossy: bool = False,
    ) -> None:
        #: Cut the master's link to its replica 0.2-0.8 s before each kill (the replica
        #: reconnects within a second): the writes of that moment are lost for sure.
        self.lossy = lossy
        self.nodes = RedisCluster(
            run_dir / "cluster", masters=3, replicas=1, node_timeout_ms=node_timeout_ms
        )
        self.rng = random.Random(sched.random())
        self.plan: list[float] = []
        t = sched.uniform(20, 45)
        while t < chaos - 10:
            self.plan.append(t)
            t += sched.uniform(30, 60)
        self.failovers: list[Failover] = []
        #: Kills skipped because the cluster had not healed from the last one.
        self.skipped = 0
        self.restarts = 0

    @property
    def url(self) -> str:
        return self.nodes.url

    def start(self) -> None:
        self.nodes.start()

    def stop(self) -> None:
        self.nodes.stop()

    def client(self) -> Redis:
        return connect(self.url, cluster=True)

    def topology(self) -> dict[int, dict[str, Any]]:
        """CLUSTER NODES as a live node sees it, by port."""
        for node in self.nodes.nodes:
            if node.proc is None:
                continue
            try:
                with redis.Redis(port=node.port, socket_timeout=2) as client:
                    found: dict[str, dict[str, Any]] = client.execute_command("CLUSTER NODES")
            except redis.RedisError:
                continue
            return {int(addr.split(":")[1].split("@")[0]): info for addr, info in found.items()}
        raise RuntimeError("no cluster node answers")

    def healthy(self) -> bool:
        """Every node up, three masters, each with a replica in sync."""
        if any(node.proc is None for node in self.nodes.nodes):
            return False
        try:
            nodes = self.topology()
            masters = [p for p, n in nodes.items() if "master" in n["flags"] and n["slots"]]
            if len(masters) != 3 or any("fail" in n["flags"] for n in nodes.values()):
                return False
            for port, info in nodes.items():
                if "slave" in info["flags"]:
                    with redis.Redis(port=port, socket_timeout=2) as client:
                        if client.info("replication").get("master_link_status") != "up":
                            return False
        except redis.RedisError:
            return False
        return True

    def failover(self, now: Callable[[], float]) -> Failover | None:
        """SIGKILL a random master and wait for its replica's promotion (blocking)."""
        nodes = self.topology()
        masters = sorted(p for p, n in nodes.items() if "master" in n["flags"] and n["slots"])
        port = self.rng.choice(masters)
        master_id = nodes[port]["node_id"]
        replicas = [p for p, n in nodes.items() if n["master_id"] == master_id]
        if not replicas:
            return None
        slots = tuple((int(low), int(high)) for low, high in nodes[port]["slots"])
        server = next(n for n in self.nodes.nodes if n.port == port)
        stopped = next(n for n in self.nodes.nodes if n.port == replicas[0]).proc
        with redis.Redis(port=port, socket_timeout=2) as client:
            client.ping()  # connected before: the offset is read right before the kill
            if self.lossy and stopped is not None:
                # the replica stopped and cut off: what the master acknowledges now is
                # on the master alone (a stopped process still gets what was already sent)
                stopped.send_signal(signal.SIGSTOP)
                client.execute_command("CLIENT", "KILL", "TYPE", "replica")
                time.sleep(self.rng.uniform(0.2, 0.8))
            offset = int(client.info("replication")["master_repl_offset"])
            server.kill()
        if self.lossy and stopped is not None:
            stopped.send_signal(signal.SIGCONT)
        killed_at = now()
        had: int | None = None
        while had is None and now() < killed_at + PROMOTION_TIMEOUT:
            for replica in replicas:
                with contextlib.suppress(redis.RedisError), redis.Redis(port=replica) as client:
                    info = client.info("replication")
                    if info.get("role") == "master":
                        had = int(info["second_repl_offset"]) - 1
                        break
            else:
                time.sleep(0.02)
        return Failover(
            at=killed_at,
            port=port,
            slots=slots,
            promoted_after=None if had is None else now() - killed_at,
            lost_bytes=None if had is None else max(0, offset - had),
        )

    def restart(self, port: int) -> None:
        next(n for n in self.nodes.nodes if n.port == port).start_same_port()

    async def chaos(
        self,
        now: Callable[[], float],
        until: Callable[[float], Awaitable[None]],
        note: Callable[[str], None],
    ) -> None:
        for at in self.plan:
            await until(at)
            healed_by = now() + 30
            while not await asyncio.to_thread(self.healthy) and now() < healed_by:  # noqa: ASYNC110
                await asyncio.sleep(0.5)  # other processes: nothing to wait on but their state
            done = await asyncio.to_thread(self.failover, now) if now() < healed_by else None
            if done is None:
                self.skipped += 1
                note("SOAK redis failover skipped: the cluster has not healed")
                continue
            self.failovers.append(done)
            after = "never" if done.promoted_after is None else f"{done.promoted_after:.1f}s"
            note(
                f"SOAK redis master :{done.port} SIGKILLed (slots {done.slots}); replica "
                f"promoted after {after}; lost at least {done.lost_bytes} bytes"
            )
            await asyncio.sleep(self.rng.uniform(3, 10))
            await asyncio.to_thread(self.restart, done.port)
            self.restarts += 1
            note(f"SOAK redis node :{done.port} started again (rejoins as a replica)")
