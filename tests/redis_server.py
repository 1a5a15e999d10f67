"""A real redis-server for the tests: random loopback port, its own temp dir, AOF on."""

from __future__ import annotations

import re
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
            if self._launch():
                return
            self.port = free_port()  # most likely the port was taken meanwhile
        raise RuntimeError(f"redis-server did not start; see {self.dir / 'redis.log'}")

    def _launch(self, *extra: str) -> bool:
        """Start redis-server on ``self.port``; ``True`` once it answers PING."""
        args = [
            self.binary,
            "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
            *extra,
            "--appendonly", "yes", "--appendfsync", self.fsync, "--save", "",
            "--logfile", str(self.dir / "redis.log"), "--daemonize", "no",
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + _READY_TIMEOUT
        while time.monotonic() < deadline and self.proc.poll() is None:
            if _ping(self.port):
                return True
            time.sleep(0.02)
        self._reap()
        return False

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


def cluster_supported() -> str | None:
    """Why a Redis Cluster cannot be started here, or None when it can."""
    binary = shutil.which("redis-server")
    if binary is None:
        return "redis-server is not installed"
    version = subprocess.run(
        [binary, "--version"], capture_output=True, check=False, timeout=10
    ).stdout.decode(errors="replace")
    found = re.search(r"v=(\d+)\.", version)
    if found is None or int(found.group(1)) < 7:
        return f"the suite's cluster needs redis-server 7+ (CLUSTER ADDSLOTSRANGE): {version}"
    return None


def _free_cluster_port() -> int:
    """A free port below 55536 whose cluster bus port (+10000) is free too."""
    for _attempt in range(200):
        port = free_port()
        if port >= 55536:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


class RedisCluster:
    """A Redis Cluster of ``masters`` redis-server nodes, slots split evenly, each with
    ``replicas`` replicas (promoted by the cluster when their master fails for
    ``node_timeout_ms``)."""

    def __init__(
        self, workdir: Path, *, masters: int = 3, replicas: int = 0, node_timeout_ms: int = 5000
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: run `make test`, which installs it")
        self.binary = binary
        self.dir = workdir
        #: Every node: the first ``masters`` start as masters, then their replicas.
        self.nodes: list[RedisServer] = []
        self.masters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms

    @property
    def url(self) -> str:
        """Any node: the cluster client finds the others."""
        return self.nodes[0].url

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def start(self) -> None:
        total = self.masters * (1 + self.replicas)
        for index in range(total):
            created = _ClusterNode(self.dir / f"node{index}", self.node_timeout_ms)
            created.start()
            self.nodes.append(created)
        first = self.nodes[0].port
        for node in self.nodes[1:]:
            _command(node.port, "CLUSTER", "MEET", "127.0.0.1", str(first))
        per = 16384 // self.masters
        for index, node in enumerate(self.nodes[: self.masters]):
            low = index * per
            high = 16383 if index == self.masters - 1 else low + per - 1
            _command(node.port, "CLUSTER", "ADDSLOTSRANGE", str(low), str(high))
        self._wait(f"cluster_known_nodes:{total}", what="the nodes to meet")
        for index, node in enumerate(self.nodes[self.masters :]):
            master = self.nodes[index % self.masters].port
            master_id = _command(master, "CLUSTER", "MYID").split("\r\n")[1]
            _command(node.port, "CLUSTER", "REPLICATE", master_id)
        self._wait("cluster_state:ok", what="the cluster to become ready")
        deadline = time.monotonic() + 30
        for node in self.nodes[self.masters :]:
            while "master_link_status:up" not in _command(node.port, "INFO", "replication"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"a replica did not sync; see {self.dir}")
                time.sleep(0.1)
        # the master counts a replica (ROLE, WAIT) once it acknowledged the sync: a
        # moment after the replica's link is up
        for node in self.nodes[: self.masters] if self.replicas else ():
            while "state=online" not in _command(node.port, "INFO", "replication"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"a master did not see its replica; see {self.dir}")
                time.sleep(0.1)

    def _wait(self, needle: str, *, what: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(needle in _command(n.port, "CLUSTER", "INFO") for n in self.nodes):
                return
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what}; see {self.dir}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def restart(self) -> None:
        """Stop every node and start it again with its data (and cluster config)."""
        for node in self.nodes:
            node.stop()
        for node in self.nodes:
            node.start_same_port()
        self._wait("cluster_state:ok", what="the cluster to come back")


class _ClusterNode(RedisServer):
    """One cluster node: cluster mode on, its nodes.conf in its own directory."""

    def __init__(self, workdir: Path, node_timeout_ms: int = 5000) -> None:
        super().__init__(workdir)
        self.port = _free_cluster_port()
        self.node_timeout_ms = node_timeout_ms

    def start(self) -> None:
        if self.proc is not None:
            raise RuntimeError("already running")
        cluster = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                   "--cluster-node-timeout", str(self.node_timeout_ms))  # fmt: skip
        if self._launch(*cluster):
            return
        raise RuntimeError(f"cluster node did not start; see {self.dir / 'redis.log'}")


def _command(port: int, *args: str) -> str:
    """One command over RESP; the reply as text (enough for CLUSTER INFO/MEET/ADDSLOTS)."""
    payload = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(payload.encode())
        data = b""
        while True:
            chunk = sock.recv(65536)
            data += chunk
            if not chunk or _complete(data):
                break
    text = data.decode(errors="replace")
    if text.startswith("-"):
        raise RuntimeError(f"redis {args[0]} {args[1] if len(args) > 1 else ''}: {text.strip()}")
    return text


def _complete(data: bytes) -> bool:
    if data[:1] in (b"+", b"-", b":"):
        return data.endswith(b"\r\n")
    if data[:1] in (b"$", b"="):
        head, _, rest = data.partition(b"\r\n")
        if not _:
            return False
        return len(rest) >= int(head[1:]) + 2
    return data.endswith(b"\r\n")
