"""``python -m bot`` with redis-py alone speaking to Redis: no pipeline client
(``bot/data/pipeline_client.py``), so every pipeline goes through redis-py's own. The
other side of ``python -m bench pipelines``; nothing else runs it."""

from __future__ import annotations

import runpy
from typing import Any

from bot.data import connection


def _none(*_args: Any, **_kwargs: Any) -> None:
    return None


setattr(connection, "pipeline_client_for", _none)  # noqa: B010 (not an export)
runpy.run_module("bot", run_name="__main__", alter_sys=True)
