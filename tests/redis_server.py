"""A real redis-server for the tests: random loopback port, its own temp dir, AOF on."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

_READY_TIMEOUT = 10.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """Start, stop, kill and restart one redis-server whose data survives restarts.

    ``fsync`` is ``always`` by default so a SIGKILL loses nothing acknowledged
    and crash tests are deterministic; pass ``"everysec"`` to test the shipped
    setting.
    """

    def __init__(self, workdir: Path, *, fsync: str = "always") -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run `make test`, which installs it")
        self.binary = binary
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        if self.proc is not None:
            raise RuntimeError("already running")
        for _attempt in range(5):
            args = [
                self.binary,
                "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--appendonly", "yes", "--appendfsync", self.fsync, "--save", "",
                "--logfile", str(self.dir / "redis.log"), "--daemonize", "no",
            ]  # fmt: skip
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + _READY_TIMEOUT
            while time.monotonic() < deadline and self.proc.poll() is None:
                if _ping(self.port):
                    return
                time.sleep(0.02)
            self._reap()
            self.port = free_port()  # most likely the port was taken meanwhile
        raise RuntimeError(f"redis-server did not start; see {self.dir / 'redis.log'}")

    def stop(self) -> None:
        """Graceful shutdown (SIGTERM): redis flushes the AOF."""
        if self.proc is not None:
            self.proc.terminate()
            self._reap()

    def kill(self) -> None:
        """Crash (SIGKILL): only what was fsynced survives."""
        if self.proc is not None:
            self.proc.kill()
            self._reap()

    def restart(self, *, crash: bool = False) -> None:
        """Stop (or kill) and start again on the same port with the same data."""
        (self.kill if crash else self.stop)()
        self.start_same_port()

    def start_same_port(self) -> None:
        port = self.port
        self.start()
        if self.port != port:
            raise RuntimeError("redis-server could not get its old port back")

    def _reap(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None
