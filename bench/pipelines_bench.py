"""Does the pipeline client pay its way? CPU per answered turn of ``python -m bot`` as it
is, beside the same process with redis-py alone speaking to Redis
(``bench/redis_py_bot.py``), on the process bench's four workloads (private chats and a
group, short chains and a 200-message chain; instant model, loopback servers, a real
redis-server). The two children's samples alternate; the table shows medians. The
pipeline client stays only while it saves at least 5 % of a turn's CPU on this mix.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .common import redis_server, sized, table
from .process_bench import ROUNDS, RUNS, _compile, _errors, workloads

CHILDREN = (
    ("with the pipeline client", "bot"),
    ("redis-py alone", "bench.redis_py_bot"),
)


async def run() -> str:
    _compile()
    runs, rounds = sized(3, RUNS), sized(3, ROUNDS)
    with redis_server() as server, tempfile.TemporaryDirectory(prefix="rc-pipes-") as tmp:
        results = await workloads(server.url, Path(tmp), CHILDREN, runs=runs, rounds=rounds)
        errors = _errors(Path(tmp))
    rows: list[list[object]] = []
    for label, (piped, plain) in results:
        rows.append([label, piped * 1e3, plain * 1e3, f"{(plain - piped) / plain:.1%}"])
    saved = sum(plain - piped for _, (piped, plain) in results) / sum(
        plain for _, (_, plain) in results
    )
    out = (
        table(
            f"CPU per answered turn (ms), python -m bot with and without the pipeline client "
            f"({rounds} bursts a sample, median of {runs} interleaved samples; it stays only "
            "if it saves >= 5 %)",
            ["workload", "with it", "redis-py alone", "saved"],
            rows,
        )
        + f"Saved over the four workloads: {saved:.1%}\n"
    )
    if errors:
        out += f"errors in the children's output ({len(errors)}), e.g. {errors[0]}\n"
    return out
