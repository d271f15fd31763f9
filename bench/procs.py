"""Starting and stopping the servers under test, each in its own process.

Every child runs in its own session, so a Ctrl-C in the terminal reaches
only the bench, which then stops its children itself (SIGTERM, then SIGKILL)
from one `finally`: no server outlives a run, whatever ends it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """One child process serving HTTP on 127.0.0.1:`port`."""

    name: str
    port: int
    popen: subprocess.Popen[bytes]
    log: Path
    ps: psutil.Process = field(init=False)

    def __post_init__(self) -> None:
        self.ps = psutil.Process(self.popen.pid)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cpu(self) -> float:
        """CPU seconds the process and its children have used so far, all threads.

        Linux's per-thread schedstat counts nanoseconds; utime + stime (what
        psutil reads) counts 10 ms ticks, too coarse for a few hundred short
        requests, so it is only the fallback.
        """
        pids = [self.popen.pid, *(child.pid for child in self.ps.children(recursive=True))]
        try:
            total = 0
            for pid in pids:  # worker processes too, for `serve --workers N`
                for task in Path(f"/proc/{pid}/task").iterdir():
                    total += int((task / "schedstat").read_text().split()[0])
            return total / 1e9
        except (OSError, ValueError, IndexError):
            t = self.ps.cpu_times()
            children = [c.cpu_times() for c in self.ps.children(recursive=True)]
            return float(t.user + t.system + sum(c.user + c.system for c in children))

    def rss(self) -> int:
        return int(self.ps.memory_info().rss)


class Fleet:
    """The children of one run; `stop()` ends them all, in reverse start order."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.servers: list[Server] = []

    def start(
        self,
        name: str,
        args: list[str],
        *,
        port: int,
        env: Mapping[str, str] | None = None,
        health: str = "/healthz",
        cwd: Path | None = None,
        executable: str = sys.executable,
        timeout: float = 30.0,
    ) -> Server:
        """Run `executable` (this Python by default) with `args`; return once `health` answers."""
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                [executable, *args],
                cwd=cwd or ROOT,
                env={**os.environ, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = Server(name, port, popen, log)
        self.servers.append(server)
        _wait_ready(server, health, timeout)
        return server

    def stop(self) -> None:
        for server in reversed(self.servers):
            with contextlib.suppress(ProcessLookupError):
                server.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        for server in reversed(self.servers):
            try:
                server.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                server.popen.kill()
                server.popen.wait()
        self.servers.clear()


def _wait_ready(server: Server, path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.popen.poll() is not None:
            raise RuntimeError(
                f"{server.name} exited at start-up; see {server.log}:\n{_tail(server.log)}"
            )
        try:
            with urllib.request.urlopen(server.url + path, timeout=1) as resp:
                if resp.status < 500:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{server.name} did not become ready; see {server.log}")


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def fleet(workdir: Path) -> Iterator[Fleet]:
    """A `Fleet` stopped on exit, also on Ctrl-C (SIGINT) and SIGTERM."""
    f = Fleet(workdir)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    # A shell starting the bench in the background hands it SIGINT ignored;
    # Ctrl-C (or kill -INT) must still stop the run and its servers.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield f
    finally:
        f.stop()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
