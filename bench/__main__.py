"""Run the benchmarks and print their tables: ``python -m bench [--full] [name ...]``.

The default is a quick run (tens of seconds) at smaller sizes; ``--full``
(``make bench FULL=1``) runs the sizes DESIGN.md's targets are stated for. Progress
goes to stderr as the benches run, the tables to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import time
from collections.abc import Coroutine
from types import ModuleType
from typing import Any

from . import common

#: name -> module with ``async def run() -> str``; imported only when it runs.
BENCHES = {
    "transcript": "bench.transcript_bench",
    "bot": "bench.bot_bench",
    "context": "bench.context_bench",
    "bytes": "bench.bytes_bench",
    "cpu": "bench.cpu_bench",
    "load": "bench.load_bench",
    "tools": "bench.tools_bench",
    "media": "bench.media_bench",
    "scale": "bench.scale_bench",
    "streaming": "bench.streaming_bench",
    "viewer": "bench.viewer_bench",
    "process": "bench.process_bench",
    "rich": "bench.rich_bench",
    "speech": "bench.speech_bench",
    "attachments": "bench.attachments_bench",
    "reading": "bench.reading_bench",
    "pipelines": "bench.pipelines_bench",
}
#: Run only when named (``python -m bench scale``): real processes, minutes.
NAMED_ONLY = {"scale", "pipelines"}

#: Smaller sizes for the quick run, by bench: module constant -> quick value. A bench
#: may instead read ``common.FULL`` / ``common.sized`` itself; a constant it no longer
#: has is skipped. The full run uses the modules' own values.
QUICK: dict[str, dict[str, object]] = {
    "transcript": {"COLD_RUNS": 10, "HOT_RUNS": 100},
    "bot": {"DEPTHS": (10, 100, 1000), "TURNS": 200, "CONCURRENT_CHATS": 20},
    "context": {"TURNS": 200, "CHECKPOINTS": (50, 100, 150, 200)},
    "cpu": {"CALLS": 20, "WARMUP": 3},
    "load": {"CONCURRENT_USERS": (50, 200), "FAIRNESS_BACKLOG": 60},
    "tools": {"TURNS": 30},
    "scale": {"MESSAGES": 200, "CHATS": 50},
}

#: Seconds between "still running" lines while a bench is busy.
HEARTBEAT = 10.0


def _load(name: str, full: bool) -> ModuleType:
    module = importlib.import_module(BENCHES[name])
    if not full:
        for attr, value in QUICK.get(name, {}).items():
            if hasattr(module, attr):
                setattr(module, attr, value)
    return module


async def _with_heartbeat(name: str, bench: Coroutine[Any, Any, str]) -> str:
    async def beat() -> None:
        started = time.perf_counter()
        while True:
            await asyncio.sleep(HEARTBEAT)
            common.progress(f"{name}: still running ({time.perf_counter() - started:.0f}s)")

    ticker = asyncio.create_task(beat())
    try:
        return await bench
    finally:
        ticker.cancel()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--full", action="store_true", help="full sizes (minutes) instead of the quick run"
    )
    parser.add_argument("names", nargs="*", metavar="name", help=f"any of {', '.join(BENCHES)}")
    args = parser.parse_args(argv)
    names = args.names or [name for name in BENCHES if name not in NAMED_ONLY]
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        print(f"unknown bench {unknown}; choose from {sorted(BENCHES)}", file=sys.stderr)
        return 2
    common.FULL = args.full
    mode = "full" if args.full else "quick (make bench FULL=1 for the full sizes)"
    common.progress(f"running {', '.join(names)}: {mode}")
    for index, name in enumerate(names, 1):
        module = _load(name, args.full)
        common.progress(f"{name} ({index}/{len(names)}) started")
        started = time.perf_counter()
        text = asyncio.run(_with_heartbeat(name, module.run()))
        common.progress(f"{name} done in {time.perf_counter() - started:.1f}s")
        print(text, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
