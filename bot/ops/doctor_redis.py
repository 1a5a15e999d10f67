"""The doctor's Redis checks: reachable, version, key layout, persistence, eviction
policy and memory (with the trees the cold sweep would compact)."""

from __future__ import annotations

from typing import Any

from ..settings import Settings
from .doctor_report import CHECK_TIMEOUT, Report

#: The oldest Redis the bot supports (streams' XAUTOCLAIM, GETDEL).
MIN_REDIS = (6, 2)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:3] if p.isdigit())


async def _config(redis: Any, name: str) -> str | None:
    """One CONFIG GET value, or None where CONFIG is disabled (managed Redis services)."""
    from redis.exceptions import ResponseError  # noqa: PLC0415

    try:
        found = await redis.config_get(name)
    except ResponseError:
        return None
    value = found.get(name, found.get(name.encode()))
    return value.decode() if isinstance(value, bytes) else value


async def check_redis(settings: Settings, report: Report) -> None:
    from redis.exceptions import (  # noqa: PLC0415
        AuthenticationError,
        ConnectionError,
        ResponseError,
        TimeoutError,
    )

    from transcript.outage import guarded  # noqa: PLC0415

    from ..data.connection import connect  # noqa: PLC0415

    where = settings.redis_location
    redis = connect(
        settings.redis_url,
        socket_timeout=CHECK_TIMEOUT / 3,
        cluster=settings.redis_cluster,
    )
    try:
        try:
            server = await redis.info("server")
        except AuthenticationError:
            report.fail("Redis", f"{where} refused the password: check the one in REDIS_URL")
            return
        except ResponseError as exc:
            first = str(exc).split(" ", 1)[0]
            hint = "put the password in REDIS_URL" if first == "NOAUTH" else "check REDIS_URL"
            report.fail("Redis", f"{where} answered {first}: {hint}")
            return
        except (ConnectionError, TimeoutError, OSError) as exc:
            start = " (`make run` starts a local one)" if not settings.redis_url_is_set else ""
            report.fail(
                "Redis",
                f"cannot reach Redis at {where} ({type(exc).__name__}): start it{start} "
                "or set REDIS_URL",
            )
            return
        version = str(server.get("redis_version", "?"))
        if _version(version) < MIN_REDIS:
            report.fail("Redis", f"Redis {version} at {where} is too old: use Redis 6.2 or newer")
            return
        report.ok("Redis", f"Redis {version} at {where}")
        await _check_layout(redis, report)
        await _check_persistence(redis, report)
        memory = await guarded(redis.info("memory"))
        policy = memory.get("maxmemory_policy") or await _config(redis, "maxmemory-policy")
        if policy is None:
            report.warn("Redis eviction", "cannot read maxmemory-policy: make it noeviction")
        elif policy == "noeviction":
            report.ok("Redis eviction", "maxmemory-policy noeviction: nothing is ever evicted")
        else:
            report.warn(
                "Redis eviction",
                f"maxmemory-policy {policy} lets Redis evict keys when memory runs short "
                "(conversations, turn states, usage): set `maxmemory-policy noeviction`",
            )
        await _check_memory(redis, memory, settings, report)
    finally:
        await redis.aclose()


async def _check_memory(
    redis: Any, memory: dict[str, Any], settings: Settings, report: Report
) -> None:
    """Used memory against maxmemory (a warning past 80 %: at 100 % a noeviction Redis
    refuses writes), and the conversation trees the cold sweep would compact."""
    from transcript.outage import guarded  # noqa: PLC0415

    from ..data.sweep import eligible_trees  # noqa: PLC0415

    mib = 1024 * 1024
    used, limit = int(memory.get("used_memory") or 0), int(memory.get("maxmemory") or 0)
    days = settings.cold_after_days
    if days > 0:
        hot, eligible = await guarded(eligible_trees(redis, days))
        trees = (
            f"{eligible} of {hot} hot conversation trees have rested COLD_AFTER_DAYS "
            f"({days:g} days) and go cold at the next sweep"
        )
    else:
        trees = "COLD_AFTER_DAYS=0: conversation trees are never compacted"
    if limit and used > 0.8 * limit:
        report.warn(
            "Redis memory",
            f"{used / mib:.0f} MiB used of maxmemory {limit / mib:.0f} MiB "
            f"({100 * used / limit:.0f} %; at 100 % Redis refuses writes); {trees}; lower "
            "COLD_AFTER_DAYS, give Redis more memory, or add Redis Cluster masters",
        )
        return
    of = f" of maxmemory {limit / mib:.0f} MiB" if limit else " (no maxmemory set)"
    report.ok("Redis memory", f"{used / mib:.0f} MiB used{of}; {trees}")


async def _check_layout(redis: Any, report: Report) -> None:
    from ..data.layout import UnknownLayoutError, check_layout  # noqa: PLC0415

    try:
        found = await check_layout(redis, claim=False)
    except UnknownLayoutError as exc:
        report.fail("Redis key layout", str(exc))
        return
    if found is None:
        report.ok("Redis key layout", "none yet: the bot writes its version at its first start")
    else:
        report.ok("Redis key layout", f"version {found}, the one this bot knows")


async def _check_persistence(redis: Any, report: Report) -> None:
    from transcript.outage import guarded  # noqa: PLC0415

    appendonly = await _config(redis, "appendonly")
    save = await _config(redis, "save")
    if appendonly is None:  # CONFIG is disabled: INFO still tells whether AOF is on
        persistence = await guarded(redis.info("persistence"))
        appendonly = "yes" if str(persistence.get("aof_enabled", "0")) == "1" else "no"
    if appendonly == "yes":
        fsync = await _config(redis, "appendfsync")
        report.ok("Redis persistence", f"AOF on (appendfsync {fsync or 'unknown'})")
    elif save:
        report.ok(
            "Redis persistence",
            f"RDB snapshots on (save {save}); AOF (`appendonly yes`) loses less in a crash",
        )
    elif save is None:
        report.warn(
            "Redis persistence",
            "AOF is off and the snapshot settings cannot be read (CONFIG is disabled): "
            "make sure the service persists its data, or set `appendonly yes`",
        )
    else:
        report.warn(
            "Redis persistence",
            "neither AOF nor RDB snapshots are on: a restart of Redis loses every "
            "conversation; set `appendonly yes` (config/redis.conf does)",
        )
