"""Payments on a Redis Cluster: a payment's credit is done only once a replica holds
it, so a failover right after loses nothing; the same payment delivered again to the
promoted replica is credited once, and its refund goes on there.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from bot.data.connection import connect
from bot.payments import Balance, Ledger

from .redis_server import _command
from .test_cluster import own_cluster
from .test_payments import CENT, Stars, paid


async def test_a_credit_waits_for_the_replica_and_a_failover_credits_it_once(
    tmp_path: Path,
) -> None:
    async with own_cluster(tmp_path / "pay", masters=1, replicas=1) as (cluster, client):
        ledger = Ledger(client)
        assert ledger.replicas is not None
        ledger.replicas.timeout_ms = 30_000
        replica = cluster.nodes[1].proc
        assert replica is not None
        replica.send_signal(signal.SIGSTOP)  # the replica falls behind
        try:
            crediting = asyncio.create_task(ledger.credit(paid("c1")))
            done, _ = await asyncio.wait({crediting}, timeout=0.5)
            assert not done  # the master has it, the replica not yet: not credited yet
        finally:
            replica.send_signal(signal.SIGCONT)
        assert (await asyncio.wait_for(crediting, 30)).new
        assert ledger.replicas.unacknowledged == 0

        cluster.nodes[0].kill()  # the master dies; its replica takes over
        promoted = cluster.nodes[1].port
        _command(promoted, "CLUSTER", "FAILOVER", "TAKEOVER")
        deadline = time.monotonic() + 30
        while "role:master" not in _command(promoted, "INFO", "replication"):
            assert time.monotonic() < deadline, "the replica was not promoted"
            await asyncio.sleep(0.05)
        survivor = connect(cluster.nodes[1].url, cluster=True)
        try:
            ledger = Ledger(survivor)
            again = await ledger.credit(paid("c1"))  # the update delivered again
            assert not again.new and again.balance == 50 * CENT
            assert await ledger.balance(paid("c1").user_id) == Balance(50 * CENT, 50 * CENT)
            assert (await ledger.refund("c1", refund_stars=Stars())).new
            assert (await ledger.stars_received()).refunds == 1
        finally:
            await survivor.aclose()
