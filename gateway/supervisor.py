"""``kpg run --workers N``: one supervisor, N worker processes, one set of ports.

Contracts, stated once:

- Listeners: each worker is a whole gateway, serving the bootstrap listener and the node
  listeners on the same fixed ports (SO_REUSEPORT). The supervisor binds their sockets, one
  per worker in worker order, hands each worker its own (over a Unix socket given as
  ``--listener-fd``) and keeps a copy, and chooses the worker of each new connection (see
  :mod:`gateway.reuseport`): while a per-address connection limit is set, every connection
  from one client address goes to one worker, so the per-address limits count for the whole
  gateway; otherwise connections are spread by address and port. A node
  listener one worker opens is opened by every worker (a ``node`` command), so that every
  worker accepts on every port. A connection stays with the worker that accepted it (and so
  does its link to the broker).
- State: the workers share the state store (the SQLite file is read again on the next read
  after any worker writes it; see :mod:`gateway.state`), so a policy set through one worker
  decides the next request on every other.
- Audit: worker i writes its spool to ``<audit.spool_dir>/worker-<i>/`` (one writer per
  directory); each worker summarises its own Produce traffic, so no request is counted twice.
- Metrics: every worker writes its values to files in a directory of the supervisor's
  (``PROMETHEUS_MULTIPROC_DIR``, prometheus_client's multiprocess mode); the supervisor serves
  their sum, with its own worker counts, on the metrics listener, with ``/healthz`` and
  ``/readyz`` (ready: at least one worker ready, and an upstream broker answers). A dead
  worker's counters and histograms are added into the files of the dead and its own removed,
  so that restarts do not add files to every scrape.
- Configuration: workers read the supervisor's copy of the file, so a worker restarted later
  runs what the others run. The supervisor checks a file as start-up does (the same loader
  and policy build, the same messages) before it becomes the copy: at start (a bad file stops
  ``kpg run`` before any worker starts) and on SIGHUP (``kpg reload``). A file refused on
  SIGHUP is logged, never reaches the copy nor any worker, and each worker is told over its
  command pipe (stdin) to record the ``reload_refused`` audit event in its own chain (the
  supervisor writes no spool: one writer per spool directory). An accepted file becomes the
  copy and SIGHUP is passed on; each worker reloads it (or refuses, a second line of defence:
  say, a plug-in that fails to build only there) and says so; refused by any worker, the
  copy goes back to the previous file and the workers that applied the new one reload the
  previous one, so that all run the same rules. A worker that read the copy just before a reload
  replaced it, not yet serving and so not sent SIGHUP, is sent SIGHUP once it serves, and is
  stopped (then started again on the copy in force) if it does not apply that file. The
  supervisor counts each reload once, by outcome (``kpg_config_reloads_total``): the workers
  count none of theirs.
- Workers that die are started again after a pause that doubles with each quick death
  (:data:`BACKOFF_S` up to :data:`MAX_BACKOFF_S`); a worker that dies :data:`CRASH_LOOP`
  times in a row within :data:`QUICK_DEATH_S` of starting is reported as given up and tried
  again every :data:`GIVEN_UP_RETRY_S` while another serves. With no worker left the
  supervisor exits with status 1.
- SIGTERM / SIGINT: passed to every worker (each stops gracefully); whatever is still
  running after the shutdown timeout and a margin is killed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from .config import ConfigError, GatewayConfig, live_part
from .health import MetricsEndpoint, Readiness, probe_upstream
from .reuseport import MAX_MESSAGE, SharedListeners, steers_by_address
from .upstream_security import client_ssl_context

log = logging.getLogger(__name__)

BACKOFF_S: Final = 0.5
MAX_BACKOFF_S: Final = 30.0
QUICK_DEATH_S: Final = 10.0
CRASH_LOOP: Final = 5
GIVEN_UP_RETRY_S: Final = MAX_BACKOFF_S
"""How often a worker given up (crashing in a loop) is tried again while another serves."""
RELOAD_WAIT_S: Final = 120.0
"""How long the supervisor waits for every worker to say how its reload went."""
STOP_MARGIN_S: Final = 10.0
RELOAD_RESULTS: Final = ("applied", "refused", "partial")
"""``kpg_config_reloads_total`` labels: every worker asked applied it (or none was running);
the supervisor or a worker refused it (those that had applied it went back to the previous
file); a worker refused it and one that had applied it could not go back."""


@dataclass(slots=True, eq=False)
class Worker:
    index: int
    process: asyncio.subprocess.Process | None = None
    ready: bool = False
    started_at: float = 0.0
    quick_deaths: int = 0
    restarts: int = 0
    given_up: bool = False
    reloads: asyncio.Queue[str] = field(default_factory=asyncio.Queue)
    """``applied <version>`` or ``refused <message>``, one per SIGHUP it was sent."""
    copy: int = 0
    """Which of the supervisor's copies of the file it runs (see ``Supervisor._copy``)."""


WorkerCommand = Callable[[int, int, int, Path], list[str]]
"""(worker index, status pipe's write end, listener channel's end, config copy) -> the
worker's command line."""

ConfigLoader = Callable[[Path], GatewayConfig]
"""Reads a copy of the operator's file as a worker will (start-up's loader, the overrides of
the command line, messages naming the operator's file).

:raises ConfigError: as at start-up."""


class Supervisor:
    def __init__(
        self,
        *,
        workers: int,
        config: GatewayConfig,
        config_file: Path | None,
        command: WorkerCommand,
        load: ConfigLoader,
        on_reload: Callable[[str, str], None] | None = None,
    ) -> None:
        """``on_reload(result, message)``: called once a reload is decided (see
        :data:`RELOAD_RESULTS`; message: old -> new policy version, or why not)."""
        self.config = config
        self._config_file = config_file
        self._command = command
        self._load = load
        self._on_reload = on_reload
        tls = config.upstream.tls
        self._upstream_tls = client_ssl_context(tls, config.source) if tls is not None else None
        self._workers = [Worker(index=i) for i in range(workers)]
        self._listeners = SharedListeners(workers=workers)
        self._run_dir = Path(tempfile.mkdtemp(prefix="kpg-run-"))
        self._metrics_dir = self._run_dir / "metrics"
        self._metrics_dir.mkdir()
        self._worker_metrics = _WorkerMetrics(self._metrics_dir)
        self.config_copy = self._run_dir / "gateway.yaml"
        self._candidate = self._run_dir / "candidate.yaml"
        self.reloads: collections.Counter[str] = collections.Counter()
        """The gateway's reloads by outcome (:data:`RELOAD_RESULTS`), one per SIGHUP."""
        self._copies = itertools.count(1)
        self._copy = 0
        """Which copy of the file the workers' copy holds now: a worker started on another
        one (it read the copy just before a reload replaced it, and was not ready to be sent
        SIGHUP) is sent SIGHUP once ready."""
        self._stopping = False
        self._done = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._endpoint: MetricsEndpoint | None = None
        self.metrics_port: int | None = None
        self.exit_status = 0

    # --- start and stop ----------------------------------------------------------------

    def adopt(self) -> None:
        """At start-up: check the operator's file as start-up does and make it the workers'
        copy; call before :meth:`run`.

        :raises ConfigError: with start-up's messages; no worker is started then.
        """
        self.config, _ = self._adopt(None)

    def close(self) -> None:
        """Remove the run directory (after :meth:`run`, or instead of it)."""
        shutil.rmtree(self._run_dir, ignore_errors=True)

    async def run(self, on_ready: Callable[[], None]) -> int:
        """Start the workers (on the file :meth:`adopt` took), serve metrics, wait for a signal
        or for every worker to be given up; returns the exit status."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop_soon)
        loop.add_signal_handler(signal.SIGHUP, lambda: self._spawn(self.reload(), "reload"))
        if self.config.metrics is not None:
            registry = CollectorRegistry()
            registry.register(self._worker_metrics)
            registry.register(_SupervisorCollector(self._workers, self.reloads))
            self._endpoint = MetricsEndpoint(registry, self.readiness)
            self.metrics_port = self._endpoint.serve(
                self.config.metrics.host, self.config.metrics.port
            )
        self._steer_by(self.config, initial=True)
        for worker in self._workers:
            await self._start(worker)
        self._spawn(self._announce_when_ready(on_ready), "announce")
        await self._done.wait()
        await self._stop_workers()
        if self._endpoint is not None:
            self._endpoint.stop()
        self.close()
        return self.exit_status

    def _stop_soon(self) -> None:
        if not self._stopping:
            log.info("supervisor: stopping %d workers", len(self._running()))
        self._stopping = True
        self._listeners.close()  # the workers' copies stay open until each stops listening
        self._done.set()

    async def _announce_when_ready(self, on_ready: Callable[[], None]) -> None:
        while not self._stopping:
            if any(w.ready for w in self._workers):
                on_ready()
                return
            await asyncio.sleep(0.05)

    async def _stop_workers(self) -> None:
        running = self._running()
        for worker in running:
            assert worker.process is not None
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGTERM)
        deadline = self.config.shutdown_timeout_s + STOP_MARGIN_S
        waits = [w.process.wait() for w in running if w.process is not None]
        if not waits:
            return
        done, pending = await asyncio.wait(
            [asyncio.ensure_future(wait) for wait in waits], timeout=deadline
        )
        if pending:
            log.warning("supervisor: %d workers did not stop in time: killed", len(pending))
            for worker in running:
                if worker.process is not None and worker.process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        worker.process.kill()
            await asyncio.wait(pending)
        for task in list(self._tasks):
            task.cancel()

    def _running(self) -> list[Worker]:
        return [w for w in self._workers if w.process is not None and w.process.returncode is None]

    # --- workers -----------------------------------------------------------------------

    async def _start(self, worker: Worker) -> None:
        read_fd, write_fd = os.pipe()
        channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(self._metrics_dir))
        try:
            process = await asyncio.create_subprocess_exec(
                *self._command(worker.index, write_fd, theirs.fileno(), self.config_copy),
                pass_fds=(write_fd, theirs.fileno()),
                env=env,
                stdin=asyncio.subprocess.PIPE,  # the command pipe (see worker_commands)
                # A terminal's Ctrl-C reaches the supervisor alone, which stops the workers
                # in order; a worker whose supervisor is gone stops itself (watch_parent).
                start_new_session=True,
            )
        except BaseException:
            channel.close()
            raise
        finally:
            os.close(write_fd)
            theirs.close()
        worker.process = process
        worker.ready = False
        worker.started_at = time.monotonic()
        worker.reloads = asyncio.Queue()
        worker.copy = self._copy
        log.info("supervisor: worker %d started (pid %d)", worker.index, process.pid)
        self._spawn(self._watch(worker, process, read_fd), f"worker-{worker.index}")
        self._spawn(self._serve_listeners(worker, channel), f"listeners-{worker.index}")
        # Every node listener the others have: read once it serves (the pipe keeps them).
        self._command_worker(worker, self._listeners.node_commands())

    async def _serve_listeners(self, worker: Worker, channel: socket.socket) -> None:
        """Answer the worker's requests for its sockets until it closes its end (it died);
        a node listener opened for the first time is opened by every worker."""
        channel.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            while request := await loop.sock_recv(channel, MAX_MESSAGE):
                opened = self._listeners.answer(channel, worker.index, request)
                if opened is not None:
                    for other in self._running():
                        self._command_worker(other, [opened])
        except OSError:
            pass  # it died between its request and the answer
        finally:
            channel.close()

    def _command_worker(self, worker: Worker, lines: Sequence[str]) -> None:
        """Write command lines to the worker's command pipe (see :func:`worker_commands`)."""
        process = worker.process
        if process is None or process.stdin is None or not lines:
            return
        with contextlib.suppress(OSError):  # a worker that died: it needs none
            process.stdin.write("".join(lines).encode())

    def _steer_by(self, config: GatewayConfig, *, initial: bool = False) -> None:
        """Steer by client address while a per-address connection limit is set (see
        :func:`gateway.reuseport.steers_by_address`)."""
        by_address = steers_by_address(config.limits)
        if not initial and by_address == self._listeners.by_address:
            return
        self._listeners.steer_by_address(by_address)
        if by_address:
            log.info(
                "supervisor: each client address is steered to one worker (a per-address "
                "connection limit is set): the per-address limits hold for the whole gateway"
            )
        else:
            log.info(
                "supervisor: connections are spread over the workers (no per-address "
                "connection limit is set): what is counted per client address, such as the "
                "audit pacing of unauthenticated clients, is counted per worker"
            )

    def _steer(self) -> None:
        """Client addresses go to the workers ready to accept (see :mod:`gateway.reuseport`)."""
        self._listeners.set_ready([w.index for w in self._workers if w.ready])

    async def _watch(self, worker: Worker, process: asyncio.subprocess.Process, fd: int) -> None:
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb")
        )
        try:
            async for line in reader:
                self._status(worker, line.decode(errors="replace").rstrip("\n"))
        finally:
            transport.close()
        status = await process.wait()
        worker.ready = False
        self._steer()
        mark_process_dead(process.pid, str(self._metrics_dir))  # type: ignore[no-untyped-call]
        self._worker_metrics.fold_dead(process.pid)
        if self._stopping:
            log.info("supervisor: worker %d (pid %d) %s", worker.index, process.pid, _exit(status))
            return
        await self._restart(worker, process.pid, status)

    def _status(self, worker: Worker, line: str) -> None:
        word, _, rest = line.partition(" ")
        if word == "ready":
            worker.ready = True
            worker.given_up = False  # tried again after a crash loop, it serves
            self._steer()
            if worker.copy != self._copy:
                self._spawn(self._catch_up(worker), f"catch-up-{worker.index}")
        elif word == "reload":
            worker.reloads.put_nowait(rest)

    async def _restart(self, worker: Worker, pid: int, status: int) -> None:
        lived = time.monotonic() - worker.started_at
        worker.quick_deaths = worker.quick_deaths + 1 if lived < QUICK_DEATH_S else 0
        if worker.quick_deaths >= CRASH_LOOP:
            worker.given_up = True
            self._listeners.drain(worker.index)  # steered to the others since it died
            if all(w.given_up for w in self._workers):
                log.error(
                    "supervisor: worker %d (pid %d) %s, crashing in a loop (see its log lines "
                    "above): no worker left: exiting",
                    worker.index,
                    pid,
                    _exit(status),
                )
                self.exit_status = 1
                self._stop_soon()
                return
            # What it died of may pass (a state topic or audit topic it could not reach while
            # the brokers were down): tried again now and then, the gateway gets its worker
            # back without a restart. It was left down for good.
            pause = GIVEN_UP_RETRY_S
            log.error(
                "supervisor: worker %d (pid %d) %s, dying within %.0f s of starting %d times "
                "in a row: crashing in a loop, given up; trying it again in %.0f s (see its "
                "log lines above)",
                worker.index,
                pid,
                _exit(status),
                QUICK_DEATH_S,
                worker.quick_deaths,
                pause,
            )
        else:
            pause = backoff(worker.quick_deaths)
            log.error(
                "supervisor: worker %d (pid %d) %s after %.1f s: starting it again in %.1f s",
                worker.index,
                pid,
                _exit(status),
                lived,
                pause,
            )
        await asyncio.sleep(pause)
        if self._stopping:
            return
        worker.restarts += 1
        await self._start(worker)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("supervisor: task %s failed", task.get_name(), exc_info=task.exception())

    # --- reload ------------------------------------------------------------------------

    def _adopt(self, running: GatewayConfig | None) -> tuple[GatewayConfig, tuple[str, ...]]:
        """Read the operator's file once, check those bytes as start-up does (with the
        settings a reload cannot change kept as ``running`` has them, when reloading) and only
        then make them the workers' copy; returns the configuration they will run and the
        settings the file changes that need a restart. Only the supervisor can name those:
        a worker is given the listen address, node ports and upstream on its command line,
        and no metrics listener, so its reload never sees them change.

        :raises ConfigError: with start-up's messages; the copy is left as it was.
        """
        from .server import check_policies  # the policy build: heavy, and only needed here

        if self._config_file is None:
            text = b"{}\n"
        else:
            try:
                text = self._config_file.read_bytes()
            except OSError as exc:
                raise ConfigError(f"{self._config_file}: cannot read: {exc.strerror}") from None
        _write_atomically(self._candidate, text)
        needs_restart: tuple[str, ...] = ()
        try:
            config = self._load(self._candidate)
            if running is not None:
                config, needs_restart = live_part(running, config)
            check_policies(config)
        except BaseException:
            self._candidate.unlink(missing_ok=True)
            raise
        os.replace(self._candidate, self.config_copy)
        self._copy = next(self._copies)
        return config, needs_restart

    async def reload(self) -> None:
        """SIGHUP: check the file as it is now, then have every worker reload it (see the
        module docstring)."""
        async with self._reload_lock:
            result, message = await self._reload()
            self.reloads[result] += 1
            if self._on_reload is not None:
                self._on_reload(result, message)

    async def _reload(self) -> tuple[str, str]:
        """One reload: its result (:data:`RELOAD_RESULTS`) and what happened."""
        previous, previous_copy = self.config_copy.read_bytes(), self._copy
        try:
            config, needs_restart = await asyncio.to_thread(self._adopt, self.config)
        except ConfigError as exc:
            self._refuse(str(exc))
            return "refused", str(exc)
        except Exception as exc:  # noqa: BLE001 - as a worker's reload: the old config stays
            log.exception("supervisor: checking the reloaded file failed")
            self._refuse(f"{type(exc).__name__}: {exc}")
            return "refused", f"{type(exc).__name__}: {exc}"
        running = [w for w in self._running() if w.ready]
        for worker in running:
            assert worker.process is not None
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGHUP)
        results = await asyncio.gather(*(self._reload_result(w) for w in running))
        took = [w for w, r in zip(running, results, strict=True) if _applied(r)]
        for worker in took:
            worker.copy = self._copy
        said = [r.partition(" ") for r in results if r is not None]
        applied = [message for verdict, _, message in said if verdict == "applied"]
        log.info(
            "supervisor: reload: %d of %d workers applied it%s",
            len(applied),
            len(running),
            f" ({applied[0]})" if applied else "",
        )
        if len(took) < len(running):
            refusals = [message for verdict, _, message in said if verdict == "refused"]
            why = refusals[0] if refusals else "a worker did not say how its reload went"
            return await self._roll_back(previous, previous_copy, took, len(running), why)
        message = f"policy version {self.config.policy_version} -> {config.policy_version}"
        for key in needs_restart:
            log.warning(
                "supervisor: reload: %s changed: it needs a restart and was not applied", key
            )
        if needs_restart:
            message += f"; not applied, needs a restart: {', '.join(needs_restart)}"
        self.config = config
        self._steer_by(config)
        return "applied", message

    async def _roll_back(
        self, previous: bytes, previous_copy: int, took: list[Worker], asked: int, why: str
    ) -> tuple[str, str]:
        """A file some workers refused: the copy goes back to the previous file and the
        workers that applied the new one reload the previous one, so that every worker runs
        the same rules (a client must not get laxer rules by reconnecting until it lands on
        another worker) and a worker started later runs them too."""
        _write_atomically(self.config_copy, previous)
        self._copy = previous_copy
        refused = f"refused by {asked - len(took)} of {asked} workers: {why}"
        if not took:
            log.error("supervisor: reload refused by every worker: the previous file stays")
            return "refused", why
        for worker in took:
            assert worker.process is not None
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGHUP)
        results = await asyncio.gather(*(self._reload_result(w) for w in took))
        stuck = [w for w, r in zip(took, results, strict=True) if not _applied(r)]
        for worker in took:
            if worker not in stuck:
                worker.copy = previous_copy
        version = self.config.policy_version
        if stuck:
            log.error(
                "supervisor: reload %s; %d of the %d workers that applied it could not go "
                "back to policy version %s: the workers run different rules until they are "
                "started again (see their log lines)",
                refused,
                len(stuck),
                len(took),
                version,
            )
            return (
                "partial",
                f"{refused}; {len(stuck)} could not go back to policy version {version}",
            )
        log.error(
            "supervisor: reload %s; the %d that applied it went back to policy version %s",
            refused,
            len(took),
            version,
        )
        return "refused", f"{refused}; the others went back to policy version {version}"

    async def _catch_up(self, worker: Worker) -> None:
        """A worker ready on a copy that is no longer the workers' (it read the file just
        before a reload replaced it): it reloads, after any reload under way."""
        async with self._reload_lock:
            process = worker.process
            if process is None or process.returncode is not None or worker.copy == self._copy:
                return
            worker.copy = self._copy
            log.info(
                "supervisor: worker %d started on the file a reload replaced: reloading it",
                worker.index,
            )
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGHUP)
            result = await self._reload_result(worker)
            if _applied(result):
                return
            # It would serve rules the gateway replaced: stopped, it is started again on the
            # copy in force (and, if it cannot build that either, dies there and is counted
            # towards a crash loop) rather than serving the replaced rules.
            log.error(
                "supervisor: worker %d (pid %d) did not reload the file in force (%s): "
                "stopping it rather than let it serve the rules a reload replaced",
                worker.index,
                process.pid,
                result or "no answer",
            )
            worker.ready = False
            self._steer()  # new connections go to the others while it stops
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)

    def _refuse(self, problem: str) -> None:
        """A file the supervisor's check refused: logged here, recorded in the audit by every
        worker (told over its command pipe), and no worker reloads."""
        log.error(
            "supervisor: reload refused, policy version %s stays in force: %s",
            self.config.policy_version,
            problem,
        )
        line = f"reload_refused {json.dumps(problem)}\n"
        for worker in self._running():
            self._command_worker(worker, [line])

    async def _reload_result(self, worker: Worker) -> str | None:
        """What ``worker`` said of the reload it was sent (``applied ...`` or ``refused
        ...``), None when it said nothing in time."""
        try:
            return await asyncio.wait_for(worker.reloads.get(), RELOAD_WAIT_S)
        except TimeoutError:
            log.error("supervisor: worker %d did not say how its reload went", worker.index)
            return None

    # --- health ------------------------------------------------------------------------

    def readiness(self) -> Readiness:
        ready = sum(w.ready for w in self._workers)
        workers = f"{ready}/{len(self._workers)} workers ready"
        if not ready:
            return Readiness(ready=False, reason=f"not ready: {workers}")
        upstream = self.config.upstream
        problem = probe_upstream(
            upstream.bootstrap_servers, upstream.connect_timeout_s, self._upstream_tls
        )
        if problem is not None:
            return Readiness(ready=False, reason=f"not ready: upstream: {problem} ({workers})")
        return Readiness(ready=True, reason=f"ready: {workers}, upstream answered")


def backoff(quick_deaths: int) -> float:
    """The pause before starting a worker again after ``quick_deaths`` quick deaths in a row
    (0: it had run a while)."""
    if quick_deaths <= 0:
        return BACKOFF_S
    return float(min(BACKOFF_S * 2 ** (quick_deaths - 1), MAX_BACKOFF_S))


def _applied(result: str | None) -> bool:
    return result is not None and result.startswith("applied")


def _exit(status: int) -> str:
    if status < 0:
        try:
            return f"was killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"was killed by signal {-status}"
    return f"exited with status {status}"


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


_MMAP_HEADER_BYTES: Final = 8
"""A worker's metrics file starts with the bytes of it in use (int32) and 4 of padding."""


class _WorkerMetrics(Collector):
    """The sum of the workers' metrics files (prometheus_client's
    :class:`MultiProcessCollector`), leaving out a file a worker has created and not yet
    sized: prometheus_client creates it empty and then extends it, and read in between it
    raised ``struct.error`` out of the whole scrape (a 500 from the metrics listener). A
    worker creates its files as it starts and as it first counts a kind of metric, so a scrape
    right after a worker restart could meet one; a worker killed in between left one for good,
    and every scrape after it failed. Such a file holds no values yet, so nothing is lost."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._lock = threading.Lock()
        """Held by a scrape (the metrics listener's thread) and by :meth:`fold_dead`: a
        scrape between the fold and the removal would count the dead worker twice, and a
        counter that then goes down again is a reset to Prometheus."""

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            files = [str(path) for path in self._directory.glob("*.db") if _sized(path)]
            return list(MultiProcessCollector.merge(files, accumulate=True))  # type: ignore[no-untyped-call]

    def fold_dead(self, pid: int) -> None:
        """Add the counters and histograms of worker ``pid``, which has died, into the files
        of the dead workers, and remove its own. Each worker left two files for good (its
        live gauges' are removed at its death), read by every scrape after: a worker given up
        and tried again every 30 s (the brokers down at its start) added 5,760 files a day.
        A file it had not yet sized holds nothing and is removed."""
        with self._lock:
            for kind in _ACCUMULATED_KINDS:
                dead = self._directory / f"{kind}_{pid}.db"
                if _sized(dead):
                    values = list(MmapedDict.read_all_values_from_file(str(dead)))  # type: ignore[no-untyped-call]
                    folded = MmapedDict(str(self._directory / f"{kind}_{_DEAD}.db"))  # type: ignore[no-untyped-call]
                    try:
                        for key, value, timestamp, _ in values:
                            kept, _ = folded.read_value(key)  # type: ignore[no-untyped-call]
                            folded.write_value(key, kept + value, timestamp)  # type: ignore[no-untyped-call]
                    finally:
                        folded.close()  # type: ignore[no-untyped-call]
                dead.unlink(missing_ok=True)


_ACCUMULATED_KINDS: Final = ("counter", "histogram")
"""The kinds of worker metrics files that outlive their worker: they add up over every
worker that ever ran (the gauges are of live workers only: ``livesum``, ``livemax``)."""
_DEAD: Final = "dead"
"""Where the dead workers' values go: ``counter_dead.db``, ``histogram_dead.db`` (no pid: only
a gauge's file name is read for one)."""


def _sized(path: Path) -> bool:
    """Whether ``path`` has its header yet (False when it is gone: a dead worker's gauge)."""
    try:
        return path.stat().st_size >= _MMAP_HEADER_BYTES
    except FileNotFoundError:
        return False


class _SupervisorCollector(Collector):
    """The supervisor's own metrics, beside the workers' sum."""

    def __init__(self, workers: Sequence[Worker], reloads: collections.Counter[str]) -> None:
        self._workers = workers
        self._reloads = reloads

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        states = GaugeMetricFamily(
            "kpg_workers", "Worker processes of kpg run --workers, by state", labels=["state"]
        )
        running = [
            w for w in self._workers if w.process is not None and w.process.returncode is None
        ]
        states.add_metric(["running"], len(running))
        states.add_metric(["ready"], sum(w.ready for w in self._workers))
        states.add_metric(["given_up"], sum(w.given_up for w in self._workers))
        yield states
        restarts = CounterMetricFamily(
            "kpg_worker_restarts", "Workers started again after they died"
        )
        restarts.add_metric([], sum(w.restarts for w in self._workers))
        yield restarts
        reloads = CounterMetricFamily(
            "kpg_config_reloads",
            "Configuration reloads of the gateway (SIGHUP, kpg reload), by result: applied, "
            "refused (by the supervisor or a worker; undone everywhere), or partial (a worker "
            "that had applied it could not go back)",
            labels=["result"],
        )
        for result in RELOAD_RESULTS:
            reloads.add_metric([result], self._reloads[result])
        yield reloads


def cpu_count() -> int:
    """The cores this process may run on (os.process_cpu_count() from Python 3.13)."""
    if hasattr(os, "sched_getaffinity"):
        return max(len(os.sched_getaffinity(0)), 1)
    return os.cpu_count() or 1


def worker_spool_dir(spool_dir: str, index: int) -> str:
    """Worker ``index``'s spool directory (the contract the Spark job reads)."""
    return str(Path(spool_dir) / f"worker-{index}")


def worker_command(
    base: Sequence[str],
    index: int,
    status_fd: int,
    listener_fd: int,
    config_copy: Path,
    config_name: str | None,
) -> list[str]:
    command = [sys.executable, "-m", "gateway.cli", "run", *base]
    command += ["--worker-index", str(index), "--status-fd", str(status_fd)]
    command += ["--listener-fd", str(listener_fd)]
    command += ["--parent-pid", str(os.getpid())]
    command += ["--config", str(config_copy)]
    if config_name is not None:
        command += ["--config-name", config_name]
    return command


async def worker_commands(
    on_reload_refused: Callable[[str], None], on_node: Callable[[int, str, int], None]
) -> None:
    """In a worker: read the supervisor's commands from stdin, one a line, until it closes.
    ``reload_refused <JSON string>``: the supervisor refused a reload (the string says why)
    before this worker saw the file. ``node {"node": id, "host": h, "port": p}``: a worker
    opened node ``id``'s listener, forwarding to broker ``h:p``; open it too."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
    )
    try:
        async for raw in reader:
            word, _, rest = raw.decode(errors="replace").rstrip("\n").partition(" ")
            if word == "reload_refused":
                on_reload_refused(str(json.loads(rest)))
            elif word == "node":
                node = json.loads(rest)
                on_node(int(node["node"]), str(node["host"]), int(node["port"]))
            else:
                log.error("unknown command from the supervisor: %r", word)
    finally:
        transport.close()


PARENT_CHECK_S: Final = 1.0


async def watch_parent(parent: int, stop: Callable[[], None]) -> None:
    """In a worker: call ``stop`` once the supervisor (``parent``) is gone, killed with no
    chance to stop its workers, so that no orphan keeps serving the ports."""
    while os.getppid() == parent:
        await asyncio.sleep(PARENT_CHECK_S)
    log.error("the supervisor (pid %d) is gone: stopping", parent)
    stop()
