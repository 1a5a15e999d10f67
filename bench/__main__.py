"""Run the benchmarks and print their tables: ``python -m bench [name ...]``."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from . import bot_bench, context_bench, transcript_bench

BENCHES: dict[str, Callable[[], Coroutine[Any, Any, str]]] = {
    "transcript": transcript_bench.run,
    "bot": bot_bench.run,
    "context": context_bench.run,
}


def main(argv: list[str]) -> int:
    names = argv or list(BENCHES)
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"unknown bench {unknown}; choose from {sorted(BENCHES)}", file=sys.stderr)
        return 2
    for name in names:
        print(asyncio.run(BENCHES[name]()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
