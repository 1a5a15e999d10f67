"""A new user's first run: settings errors, --help, make run/stop, locks, containers.

These tests need no Redis, Telegram or model server of their own; the ones that run
``python -m bot`` or ``make`` do it in a temp dir with the settings environment
variables removed, so only what the test gives is seen.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.settings import Settings, SettingsError, is_local_endpoint
from bot.settings_help import SETTINGS_HELP
from bot.settings_load import load_settings

from .test_docs import reference_settings

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "123456:TEST-token-abcdefghijklmnopqrstuvw"
HEAVY = ("aiogram", "openai", "redis")


def clean_env(**values: str) -> dict[str, str]:
    """The environment without any setting of the bot, plus *values*."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key.upper() not in SETTINGS_HELP and not key.startswith(("OPENAI_", "TELEGRAM_"))
    }
    env["PYTHONPATH"] = str(ROOT)
    env.update(values)
    return env


def run_bot(cwd: Path, *args: str, **values: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=cwd,
        env=clean_env(**values),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("replychain: ")
    return lines[0]


@pytest.fixture
def shipped_env(tmp_path: Path) -> Path:
    """A working directory holding config/example.env as .env, as the README says."""
    shutil.copy(ROOT / "config" / "example.env", tmp_path / ".env")
    return tmp_path


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """This process's environment without any setting of the bot (restored afterwards)."""
    for key in list(os.environ):
        if key.upper() in SETTINGS_HELP:
            monkeypatch.delenv(key)
    return monkeypatch


# --- settings ---------------------------------------------------------------------------


def test_shipped_example_env_says_the_token_is_not_set(shipped_env: Path) -> None:
    line = one_line(run_bot(shipped_env))
    assert "TELEGRAM_BOT_TOKEN is not set" in line
    assert "@BotFather" in line


def test_blank_values_count_as_not_set(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        f"TELEGRAM_BOT_TOKEN={TOKEN}\nOPENAI_API_KEY=k\nREDIS_URL=\nCONTEXT_TOKEN_BUDGET=\n"
        "MAX_CONCURRENT_TURNS=   \nLOG_LEVEL=\n"
    )
    result = run_bot(tmp_path, "check-config", "--redis-mode")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "local"
    assert one_line(run_bot(tmp_path, TELEGRAM_BOT_TOKEN="  ")).endswith(
        "TELEGRAM_BOT_TOKEN=<token> in .env"
    )


@pytest.mark.parametrize("base_url", [None, "https://openrouter.ai/api/v1", "http://8.8.8.8/v1"])
def test_a_remote_endpoint_without_a_key_stops_start_up(
    tmp_path: Path, base_url: str | None
) -> None:
    values = {"TELEGRAM_BOT_TOKEN": TOKEN, "OPENAI_API_KEY": ""}
    if base_url:
        values["OPENAI_BASE_URL"] = base_url
    line = one_line(run_bot(tmp_path, **values))
    assert "OPENAI_API_KEY is not set" in line
    assert (base_url or "OpenAI") in line
    assert "OPENAI_BASE_URL" in line


@pytest.mark.parametrize(
    "base_url",
    [
        "http://127.0.0.1:11434/v1",
        "http://localhost:8000/v1",
        "http://[::1]:8080/v1",
        "http://192.168.1.20:8080/v1",
        "http://10.0.0.5/v1",
        "http://ollama:11434/v1",
        "http://host.docker.internal:11434/v1",
        "http://gpu-box.local:8000/v1",
    ],
)
def test_a_local_endpoint_needs_no_key(env: pytest.MonkeyPatch, base_url: str) -> None:
    assert is_local_endpoint(base_url)
    env.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    env.setenv("OPENAI_BASE_URL", base_url)
    settings = load_settings(env_file=None)
    assert settings.openai_api_key is None
    assert settings.api_key() == "not-needed"


def test_local_endpoint_without_key_passes_the_process_check(tmp_path: Path) -> None:
    result = run_bot(
        tmp_path,
        "check-config",
        TELEGRAM_BOT_TOKEN=TOKEN,
        OPENAI_BASE_URL="http://127.0.0.1:11434/v1",
        REDIS_URL="redis://:pa55word-secret@127.0.0.1:6379/0",
    )
    assert result.returncode == 0, result.stderr
    assert "settings are fine" in result.stdout
    assert "OPENAI_BASE_URL=http://127.0.0.1:11434/v1" in result.stdout
    assert TOKEN not in result.stdout
    assert "pa55word-secret" not in result.stdout


def test_new_settings_have_their_defaults(env: pytest.MonkeyPatch) -> None:
    env.setenv("TELEGRAM_BOT_TOKEN", TOKEN)
    env.setenv("OPENAI_API_KEY", "k")
    settings = load_settings(env_file=None)
    assert settings.max_concurrent_turns == 256
    assert settings.user_max_concurrent_turns == 2
    assert settings.turn_max_attempts == 3
    assert settings.flood_wait_max == 600.0
    assert not settings.redis_url_is_set
    env.setenv("TURN_MAX_ATTEMPTS", "0")
    with pytest.raises(SettingsError, match="TURN_MAX_ATTEMPTS is invalid"):
        load_settings(env_file=None)


def test_bad_settings_are_reported_before_aiogram_is_imported(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from bot.__main__ import main\n"
        "code = main([])\n"
        f"print(code, [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    for values in ({}, {"TELEGRAM_BOT_TOKEN": "not a token"}, {"TELEGRAM_BOT_TOKEN": TOKEN}):
        result = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=clean_env(**values),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.stdout.strip() == "2 []", (values, result)
        assert len(result.stderr.strip().splitlines()) == 1


# --- the command line -------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_usage_and_starts_nothing(tmp_path: Path, flag: str) -> None:
    result = run_bot(tmp_path, flag)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.startswith("usage: python -m bot")
    assert "Telegram" in text
    assert ".env" in text
    for name in SETTINGS_HELP:
        assert re.search(rf"^  {name}\s+\S", text, re.MULTILINE), name
    assert "exit codes" in text
    for code in ("0", "1", "2"):
        assert re.search(rf"^  {code}  \S", text, re.MULTILINE)
    assert "check-config" in text
    assert result.stderr == ""


def test_an_unknown_command_is_a_usage_error(tmp_path: Path) -> None:
    result = run_bot(tmp_path, "frobnicate")
    assert result.returncode == 2
    assert "usage:" in result.stderr


@pytest.mark.parametrize(("level", "expected"), [("INFO", "WARNING"), ("DEBUG", "DEBUG")])
def test_http_client_lines_are_quiet_unless_debug(level: str, expected: str) -> None:
    code = (
        "import logging\n"
        "from bot.logs import CHATTY_LOGGERS, configure_logging\n"
        "from bot.settings_load import load_settings\n"
        "configure_logging(load_settings(env_file=None))\n"
        "names = CHATTY_LOGGERS + ('httpx', 'openai', 'aiohttp.access')\n"
        "print({logging.getLevelName(logging.getLogger(n).getEffectiveLevel()) for n in names})\n"
        "print(logging.getLevelName(logging.getLogger('bot').getEffectiveLevel()))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env(TELEGRAM_BOT_TOKEN=TOKEN, OPENAI_API_KEY="k", LOG_LEVEL=level),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == [repr({expected}), level]


# --- make run / make stop ---------------------------------------------------------------


def make_dir(tmp_path: Path) -> Path:
    """A copy of the Makefile and config/ whose .venv is the one running these tests."""
    work = tmp_path / "clone"
    work.mkdir()
    shutil.copy(ROOT / "Makefile", work / "Makefile")
    shutil.copytree(ROOT / "config", work / "config")
    (work / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    return work


def make(work: Path, *targets: str, **values: str) -> subprocess.CompletedProcess[str]:
    # -o: the venv is the test's own; never reinstall into it from the copy.
    return subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/.runtime-stamp", *targets],
        cwd=work,
        env=clean_env(**values),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(int(proc.name))
    return found


needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


@needs_make
def test_make_run_with_the_shipped_example_env_starts_no_redis(tmp_path: Path) -> None:
    work = make_dir(tmp_path)
    shutil.copy(ROOT / "config" / "example.env", work / ".env")
    result = make(work, "run")
    assert result.returncode != 0
    assert "replychain: TELEGRAM_BOT_TOKEN is not set" in result.stderr
    assert "Traceback" not in result.stderr
    assert "starting local redis-server" not in result.stdout
    assert not (work / "data").exists()
    assert processes_mentioning(str(work)) == []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


@needs_make
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")
def test_make_stop_stops_the_local_redis_and_nothing_else(tmp_path: Path) -> None:
    work = make_dir(tmp_path)
    data = work / "data"
    data.mkdir()
    pidfile = data / "redis.pid"
    assert "no local redis-server" in make(work, "stop").stdout

    # a pidfile naming some other process: never killed, the stale file is removed
    other = subprocess.Popen(["sleep", "30"])
    try:
        pidfile.write_text(f"{other.pid}\n")
        result = make(work, "stop")
        assert result.returncode == 0, result.stderr
        assert "stale" in result.stdout
        assert other.poll() is None
        assert not pidfile.exists()
    finally:
        other.kill()
        other.wait()

    # the redis-server `make run` starts (same flags): stopped, pidfile gone
    subprocess.run(
        [
            *("redis-server", "--port", str(free_port()), "--bind", "127.0.0.1"),
            *("--dir", str(data), "--daemonize", "yes"),
            *("--pidfile", str(pidfile), "--logfile", str(data / "log")),
        ],
        check=True,
        timeout=30,
    )
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline, "redis-server wrote no pidfile"
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    try:
        result = make(work, "stop")
        assert result.returncode == 0, result.stderr
        assert f"stopping local redis-server (pid {pid})" in result.stdout
        assert wait_gone(pid, timeout=1)
        assert not pidfile.exists()
    finally:
        if not wait_gone(pid, timeout=0):
            os.kill(pid, signal.SIGKILL)


# --- documentation, lock files, containers ----------------------------------------------


def test_help_and_settings_name_the_same_settings() -> None:
    # docs/settings.md against the code: tests/test_docs.py
    assert set(SETTINGS_HELP) == {name.upper() for name in Settings.model_fields}


def test_example_env_names_only_real_settings() -> None:
    text = (ROOT / "config" / "example.env").read_text(encoding="utf-8")
    named = set(re.findall(r"^#? ?([A-Z][A-Z0-9_]+)=", text, re.MULTILINE))
    assert named <= set(SETTINGS_HELP), named - set(SETTINGS_HELP)
    assert re.search(r"^TELEGRAM_BOT_TOKEN=$", text, re.MULTILINE)


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith((" ", "#", "-")):
            name, _, version = line.partition("==")
            assert version, f"{path.name}: {line!r} is not pinned"
            pins[_name(name)] = version.split(";")[0].strip()
    return pins


def test_lock_files_pin_every_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = {_name(r) for r in project["dependencies"]}
    dev = {_name(r) for r in project["optional-dependencies"]["dev"]}
    assert "tenacity" in runtime
    locked = _pins(ROOT / "requirements.txt")
    locked_dev = _pins(ROOT / "requirements-dev.txt")
    assert runtime <= set(locked), "run `make lock`: missing " + str(runtime - set(locked))
    assert runtime | dev <= set(locked_dev), "run `make lock`"
    tools = {"pytest", "ruff", "mypy", "hypothesis", "pyyaml"}
    assert tools <= dev
    assert not tools & set(locked), "development tools leak into the runtime lock"
    for name, version in locked.items():
        assert locked_dev.get(name) == version, f"{name} differs between the lock files"


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_compose_runs_the_bot_with_a_durable_redis() -> None:
    compose = _compose()
    bot, redis = compose["services"]["bot"], compose["services"]["redis"]
    assert bot["build"] in (".", {"context": "."})
    assert bot["restart"] == redis["restart"] == "unless-stopped"
    assert str(redis["image"]).startswith("redis:7")
    command = redis["command"]
    words = command.split() if isinstance(command, str) else [str(w) for w in command]
    assert words[words.index("--appendonly") + 1] == "yes"
    volume, _, target = redis["volumes"][0].partition(":")
    assert target == "/data"
    assert volume in compose["volumes"]
    url = bot["environment"]["REDIS_URL"]
    assert "redis://redis:6379" in url
    assert "redis" in bot["depends_on"]
    assert bot["hostname"], "BOT_INSTANCE must not change when the container is recreated"


def test_compose_passes_every_documented_setting_to_the_bot() -> None:
    bot = _compose()["services"]["bot"]
    env_file = bot.get("env_file", [])
    env_files = [env_file] if isinstance(env_file, str) else env_file
    passes_dotenv = ".env" in [f if isinstance(f, str) else f["path"] for f in env_files]
    environment = bot.get("environment", {})
    named = set(environment) if isinstance(environment, dict) else set()
    for name in reference_settings():
        assert passes_dotenv or name in named, name


def test_dockerfile_is_slim_non_root_and_installs_the_runtime_lock() -> None:
    lines = [
        line.strip()
        for line in (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert lines[0] == "FROM python:3.11-slim"
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users, "the image must not run as root"
    assert users[-1] not in ("root", "0")
    assert any(re.match(r"RUN pip install .*-r requirements\.txt", line) for line in lines)
    assert "COPY requirements.txt ./" in lines
    assert not any("requirements-dev" in line or "[dev]" in line for line in lines)
    assert lines[-1] == 'CMD ["python", "-m", "bot"]'
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert ".env" in ignored


# --- make bench -------------------------------------------------------------------------


@needs_make
@pytest.mark.parametrize(("values", "full"), [({}, False), ({"FULL": "1"}, True)])
def test_make_bench_is_quick_unless_full(values: dict[str, str], full: bool) -> None:
    args = [f"{key}={value}" for key, value in values.items()]
    result = subprocess.run(
        ["make", "-n", "-o", ".venv/.dev-stamp", "-o", "redis-server", "bench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    [command] = [line for line in result.stdout.splitlines() if "-m bench" in line]
    assert command.rstrip().endswith("--full") is full


def test_quick_bench_sizes_name_constants_the_benches_have() -> None:
    from bench.__main__ import BENCHES, QUICK  # noqa: PLC0415

    for name, sizes in QUICK.items():
        module = importlib.import_module(BENCHES[name])
        missing = [attr for attr in sizes if not hasattr(module, attr)]
        assert not missing, f"bench {name} lost {missing}: update QUICK in bench/__main__.py"
