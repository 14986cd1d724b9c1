"""``kpg``: the gateway's command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import importlib.metadata
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Final

from .config import (
    ConfigError,
    GatewayConfig,
    HostPort,
    config_warnings,
    load,
    with_embedded_upstream,
)
from .embedded import EmbeddedBroker, EmbeddedBrokerError
from .files import UnsafePathError, make_private_dirs, write_replacing
from .logs import LOG_FORMATS
from .logs import configure as configure_logging
from .rlimits import raise_open_file_limit
from .supervisor import (
    RELOAD_WAIT_S,
    Supervisor,
    cpu_count,
    watch_parent,
    worker_command,
    worker_commands,
    worker_spool_dir,
)

log = logging.getLogger("kpg")

VERDICT_WAIT_S: Final = RELOAD_WAIT_S + 30.0
"""How long ``kpg reload --pid-file`` waits for the gateway to say how the reload went."""


def _run_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "run",
        help="run the gateway",
        description=(
            "Run the gateway. Clients point bootstrap.servers at the address it prints. "
            "With no upstream configured it starts an embedded Tansu broker (the "
            "kafka-policy-gateway[embedded] extra; not in the image) on a free "
            "loopback port and fronts it (and stops, exit status 1, if that broker exits). "
            "Flags override the config file."
        ),
    )
    run.add_argument(
        "--config", type=Path, help="gateway YAML config (see deploy/gateway.example.yaml)"
    )
    run.add_argument(
        "--upstream",
        metavar="HOST:PORT[,HOST:PORT...]",
        help="broker bootstrap servers (overrides upstream.bootstrap_servers)",
    )
    run.add_argument("--listen", metavar="HOST:PORT", help="bootstrap listener (overrides listen)")
    run.add_argument(
        "--advertised-host",
        metavar="NAME",
        help="host name clients use to reach the gateway (overrides advertised_host)",
    )
    run.add_argument(
        "--node-port-base",
        type=int,
        metavar="PORT",
        help="node N listens on PORT+N; 0 picks free ports (overrides node_port_base)",
    )
    run.add_argument(
        "--metrics", metavar="HOST:PORT", help="serve Prometheus metrics here (overrides metrics)"
    )
    run.add_argument(
        "--audit-instance",
        metavar="NAME",
        help="the audit events' gateway_instance, for every worker (overrides "
        "audit.instance): one name per pod or host where they share a configuration",
    )
    run.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help=(
            "worker processes, each a whole gateway on the same ports (SO_REUSEPORT) under one "
            "supervisor that, while a per-address connection limit is set, steers each client "
            "address to one worker (so the per-address limits hold for the whole gateway), "
            "starts a dead one again and serves the metrics of all (default: "
            "the cores this process may use; 1 runs the gateway in this process, no supervisor). "
            "More than one needs fixed ports: a listen port and node_port_base other than 0"
        ),
    )
    run.add_argument(
        "--pid-file",
        type=Path,
        metavar="PATH",
        help="write the gateway's pid here (the supervisor's with --workers), and the outcome "
        "of each reload to PATH.reload, for kpg reload",
    )
    run.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log lines at this level and above go to stderr (default: INFO)",
    )
    run.add_argument(
        "--log-format",
        default="text",
        choices=LOG_FORMATS,
        help="text lines, or one JSON object per line (time, level, worker under --workers, "
        "logger, message, exception) for a log pipeline (default: text)",
    )
    run.add_argument(
        "--check",
        action="store_true",
        help="check the configuration and exit: 0 when the gateway would start with it, 2 "
        "and start-up's message when not. Loads the file with the flags given, the policies "
        "and record validation (plug-ins imported and configured), secrets, and the TLS "
        "certificates of the listeners and the upstream; opens no port, writes no file and "
        "reaches no broker or schema registry",
    )
    # Set by the supervisor for its workers; not for people.
    run.add_argument("--worker-index", type=int, help=argparse.SUPPRESS)
    run.add_argument("--status-fd", type=int, help=argparse.SUPPRESS)
    run.add_argument("--listener-fd", type=int, help=argparse.SUPPRESS)
    run.add_argument("--config-name", help=argparse.SUPPRESS)
    run.add_argument("--embedded-upstream", action="store_true", help=argparse.SUPPRESS)
    run.add_argument("--parent-pid", type=int, help=argparse.SUPPRESS)
    run.set_defaults(func=_cmd_run)
    run.epilog = (
        "Reload: SIGHUP (or kpg reload) reads the config file again and puts policies (rules, "
        "plug-ins, record validation), limits, client_configs, upstream (but "
        "bootstrap_servers, tls and sasl; its timeouts for connections opened from then on) "
        "and shutdown_timeout_s in force for the next request, connections kept; a bad file "
        "is refused with start-up's messages and the running configuration stays. listen, "
        "advertised_host, node_port_base, "
        "upstream.bootstrap_servers, upstream.tls, upstream.sasl, metrics, tls, sasl, state and "
        "audit need a restart (a reload that changes them names them). On "
        "the metrics listener: /metrics, /healthz, "
        "/readyz (a broker probe at most once a second; 32 connections, 8 per address, 50 "
        "accepted a second, 5 s and 16 KiB per request). At start the soft open-file limit "
        "is raised to the hard one."
    )


def _reload_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    reload = sub.add_parser(
        "reload",
        help="make a running gateway read its config file again (SIGHUP)",
        description=(
            "Send SIGHUP to a running gateway (kpg run), found by its pid file or pid (with "
            "--pid-file, only if that process's command line is kpg run --pid-file naming the "
            "same file: a stale pid file exits 2, nothing signalled). It reads "
            "its config file again: policies (rules, plug-ins, record validation), limits, "
            "client_configs, upstream (but bootstrap_servers, tls and sasl; its timeouts for "
            "connections opened from then on) and shutdown_timeout_s apply to the next "
            "request, connections stay open; a bad file is "
            "refused with start-up's messages and the running configuration stays. With "
            "--pid-file, kpg reload waits for the outcome (which kpg run --pid-file PATH "
            "writes to PATH.reload), prints it and exits 0 when applied, 1 when refused (a file "
            "any worker refuses is undone in all), when workers were left on different files "
            "(partial) or no outcome came. Calls with the same --pid-file take turns (each "
            "holds PATH.reload.lock until its outcome came), so each prints its own reload's "
            "outcome; with --pid it only signals. "
            "The outcome is also in the gateway's log ('configuration reloaded' or 'reload "
            "refused'), in kpg_config_reloads_total{result=applied|refused|partial}, "
            "kpg_policy_version and, with audit on, a lifecycle audit event."
        ),
    )
    target = reload.add_mutually_exclusive_group(required=True)
    target.add_argument("--pid-file", type=Path, metavar="PATH", help="kpg run --pid-file PATH")
    target.add_argument("--pid", type=int, help="the gateway's pid (the supervisor's)")
    reload.set_defaults(func=_cmd_reload)


def _cmd_reload(args: argparse.Namespace) -> int:
    if args.pid_file is None:
        if not _hang_up(args.pid):
            return 1
        print(f"kpg reload: sent SIGHUP to pid {args.pid}; the outcome is in the gateway's log")
        return 0
    if _read_pid(args.pid_file) is None:
        return 2
    with _reload_lock(args.pid_file):
        pid = _read_pid(args.pid_file)  # again: the gateway may have restarted meanwhile
        if pid is None:
            return 2
        problem = _not_the_gateway(pid, args.pid_file)
        if problem is not None:
            print(
                f"kpg reload: {args.pid_file} names pid {pid}, {problem}: not signalled (a "
                "stale pid file: is the gateway running?)",
                file=sys.stderr,
            )
            return 2
        return _reload_and_wait(pid, verdict_path(args.pid_file))


def _not_the_gateway(pid: int, pid_file: Path) -> str | None:
    """Why ``pid`` is not the ``kpg run --pid-file`` that wrote ``pid_file`` (None: it is).

    A gateway that died without removing its pid file (SIGKILL, a crash, a reboot) leaves a
    pid that the system gives to another process, and a pid file in a directory others can
    write may name any process: SIGHUP ends most, so only a process whose command line is
    ``run ... --pid-file`` naming this very file (/proc/<pid>/cmdline, a relative path
    taken from /proc/<pid>/cwd) is signalled. Without /proc nothing is signalled.
    """
    proc = Path("/proc", str(pid))
    try:
        argv = [os.fsdecode(a) for a in (proc / "cmdline").read_bytes().split(b"\0")]
    except OSError as exc:
        return f"whose command line cannot be read ({exc.strerror})"
    named = _pid_file_argument(argv)
    if named is None or "run" not in argv:
        shown = " ".join(argv).strip()
        return f"which is not a kpg run --pid-file (its command line: {shown[:200]!r})"
    target = Path(named)
    if not target.is_absolute():
        try:
            target = Path(os.readlink(proc / "cwd")) / target
        except OSError as exc:
            return f"whose working directory cannot be read ({exc.strerror})"
    try:
        same = os.path.samefile(target, pid_file)
    except OSError:
        same = False
    return None if same else f"a kpg run whose pid file is {named}, not this one"


def _pid_file_argument(argv: list[str]) -> str | None:
    """The last ``--pid-file`` value on a command line, as argparse reads it."""
    found = None
    for i, arg in enumerate(argv):
        if arg == "--pid-file" and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith("--pid-file="):
            found = arg.partition("=")[2]
    return found


def _read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except FileNotFoundError:
        # kpg run removes its pid file when it stops: the usual case is no gateway at all.
        print(
            f"kpg reload: {pid_file}: no such file: no kpg run --pid-file {pid_file} is "
            "running (a gateway started without --pid-file takes kpg reload --pid PID)",
            file=sys.stderr,
        )
        return None
    except (OSError, ValueError) as exc:
        print(f"kpg reload: {pid_file}: no pid in it: {exc}", file=sys.stderr)
        return None


def _hang_up(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGHUP)
    except OSError as exc:
        print(f"kpg reload: cannot signal pid {pid}: {exc.strerror}", file=sys.stderr)
        return False
    return True


def _reload_and_wait(pid: int, verdicts: Path) -> int:
    """SIGHUP to ``pid``, then its verdict: the first one newer than the latest before."""
    seen = _read_verdict(verdicts, pid)
    if not _hang_up(pid):
        return 1
    deadline = time.monotonic() + VERDICT_WAIT_S
    after = seen[0] if seen is not None else 0
    while time.monotonic() < deadline:
        verdict = _read_verdict(verdicts, pid)
        if verdict is not None and verdict[0] > after:
            _, result, message = verdict
            if result == "applied":
                print(f"kpg reload: applied: {message}")
                return 0
            print(f"kpg reload: {result}: {message}", file=sys.stderr)
            return 1
        time.sleep(0.1)
    print(
        f"kpg reload: sent SIGHUP to pid {pid}, no outcome in {verdicts} within "
        f"{VERDICT_WAIT_S:.0f} s: see the gateway's log",
        file=sys.stderr,
    )
    return 1


def reload_lock_path(pid_file: Path) -> Path:
    """What ``kpg reload --pid-file PATH`` locks: ``PATH.reload.lock``."""
    return pid_file.with_name(pid_file.name + ".reload.lock")


@contextlib.contextmanager
def _reload_lock(pid_file: Path) -> Iterator[None]:
    """Holds ``PATH.reload.lock`` (an exclusive flock) around one ``kpg reload --pid-file
    PATH``, from reading the latest verdict's seq until its own verdict came (or the wait
    ended): verdicts name no caller, so two calls at once would both take the first reload's
    verdict for their own. The file is left in place (removing a lock file another call holds
    would let a third lock a new one). When it cannot be created or locked (a directory the
    caller may not write, a file system without flock) the call goes on unlocked, saying so."""
    path = reload_lock_path(pid_file)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        _unserialized(path, exc)
        yield
        return
    try:
        _lock(fd, path)
        yield
    finally:
        os.close(fd)


def _lock(fd: int, path: Path) -> None:
    """Takes the exclusive flock on ``fd``, waiting (and saying so) while another holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        print(
            f"kpg reload: waiting for another kpg reload of this gateway ({path})", file=sys.stderr
        )
    except OSError as exc:
        _unserialized(path, exc)
        return
    fcntl.flock(fd, fcntl.LOCK_EX)


def _unserialized(path: Path, exc: OSError) -> None:
    print(
        f"kpg reload: cannot lock {path} ({exc.strerror}): going on unserialized, so a kpg "
        "reload running at the same time may print this one's outcome",
        file=sys.stderr,
    )


def verdict_path(pid_file: Path) -> Path:
    """Where ``kpg run --pid-file PATH`` writes how its latest reload went: ``PATH.reload``."""
    return pid_file.with_name(pid_file.name + ".reload")


def _read_verdict(path: Path, pid: int) -> tuple[int, str, str] | None:
    """(seq, result, message) of the latest verdict the gateway of ``pid`` wrote (None:
    none yet, another process's, or a file that user did not write: in a directory others
    can write, such as /tmp, anyone could put one there first)."""
    try:
        with path.open("rb") as file:
            if os.fstat(file.fileno()).st_uid != _process_uid(pid):
                return None
            verdict = json.loads(file.read())
        if verdict["pid"] != pid:
            return None
        return int(verdict["seq"]), str(verdict["result"]), str(verdict["message"])
    except (OSError, ValueError, TypeError, KeyError):
        return None


def _process_uid(pid: int) -> int | None:
    """The effective uid of process ``pid`` (/proc/<pid>/status), None if unknown."""
    try:
        for line in Path("/proc", str(pid), "status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[2])
    except (OSError, ValueError, IndexError):
        pass
    return None


class ReloadVerdicts:
    """Writes each reload's outcome for ``kpg reload`` (see :func:`verdict_path`): one JSON
    object, ``pid``, ``seq`` (1, 2, ... since this start), ``result`` and ``message``."""

    def __init__(self, pid_file: Path | None) -> None:
        self._path = verdict_path(pid_file) if pid_file is not None else None
        self._seq = 0

    def __call__(self, result: str, message: str) -> None:
        if self._path is None:
            return
        self._seq += 1
        verdict = {"pid": os.getpid(), "seq": self._seq, "result": result, "message": message}
        try:
            write_replacing(self._path, (json.dumps(verdict) + "\n").encode(), 0o640)
        except OSError as exc:
            log.warning("cannot write the reload's outcome to %s: %s", self._path, exc)


def package_version() -> str:
    """The installed distribution's version (its metadata, as pip reports it)."""
    try:
        return importlib.metadata.version("kafka-policy-gateway")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kpg", description="kafka-policy-gateway: a policy gateway for Apache Kafka."
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {package_version()}",
        help="print the installed kafka-policy-gateway version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _run_parser(sub)
    _reload_parser(sub)
    from spark_audit.cli import add_audit_commands

    from .configs_cli import add_configs_command
    from .tools import add_commands

    add_commands(sub)
    add_configs_command(sub)
    add_audit_commands(sub)
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    raise_open_file_limit()  # first: max.connections' default is derived from it
    # Nothing the gateway (or a plug-in) creates is for other users to read or anyone but
    # its own user to write: a umask of at least 027, as daemons set one (the modes in
    # gateway.files are narrower still where it matters).
    os.umask(os.umask(0o077) | 0o027)
    if not _record_scanner_known():
        return 2
    overrides = {
        "upstream.bootstrap_servers": args.upstream,
        "listen": args.listen,
        "advertised_host": args.advertised_host,
        "node_port_base": args.node_port_base,
        "metrics": args.metrics,
        "audit.instance": args.audit_instance,
    }
    try:
        config = load(args.config, overrides, source=args.config_name)
    except ConfigError as exc:
        print(f"kpg: configuration error: {exc}", file=sys.stderr)
        return 2
    if args.worker_index is not None:
        return _serve(_worker_config(config, args), lambda: _reload_worker(args, overrides), args)
    workers = _workers(config, args)
    if workers is None:
        return 2
    if args.check:
        return _check(config)
    return _start(config, workers, args, overrides)


def _start(
    config: GatewayConfig, workers: int, args: argparse.Namespace, overrides: dict[str, object]
) -> int:
    """Run the gateway (its supervisor, with more than one worker), with an embedded broker
    when no upstream is configured."""
    embedded: EmbeddedBroker | None = None
    stopping = threading.Event()
    broker_lost = threading.Event()
    if not config.upstream.bootstrap_servers:
        embedded = EmbeddedBroker(own_session=True, with_parent=True)
        try:
            address = embedded.start()
        except EmbeddedBrokerError as exc:
            print(f"kpg: {exc}", file=sys.stderr)
            return 2
        print(
            f"kpg: no upstream configured: started an embedded Tansu broker on {address}",
            flush=True,
        )
        config = with_embedded_upstream(config, address)
        _watch_embedded(embedded, stopping, broker_lost)

    def reloaded() -> GatewayConfig:
        fresh = load(args.config, overrides)
        return with_embedded_upstream(fresh, address) if embedded is not None else fresh

    try:
        with _pid_file(args.pid_file) as written:
            if not written:
                return 2
            if workers > 1:
                status = _supervise(config, workers, args, overrides, embedded is not None)
            else:
                status = _serve(config, reloaded, args)
            return 1 if broker_lost.is_set() else status
    finally:
        stopping.set()
        if embedded is not None:
            embedded.stop()


def _watch_embedded(
    embedded: EmbeddedBroker, stopping: threading.Event, lost: threading.Event
) -> None:
    """When the embedded broker exits on its own, say so and stop the gateway (SIGTERM to
    this process: the graceful stop), which then exits 1: its topics and records went with
    it, and a gateway left in front of nothing answered every client "no broker reachable"."""
    process = embedded.process
    assert process is not None

    def watch() -> None:
        status = process.wait()
        if stopping.is_set():
            return
        lost.set()
        log.error(
            "the embedded broker exited (status %s), its topics and records with it: "
            "stopping the gateway; start kpg run again",
            status,
        )
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="kpg-embedded-broker", daemon=True).start()


def _record_scanner_known() -> bool:
    try:
        # Reads KPG_RECORD_SCANNER on import: a value it refuses stops kpg run here, before
        # an embedded broker or a worker starts, not as a traceback in every worker.
        importlib.import_module("protocol.records")
    except ImportError as exc:
        print(f"kpg: {exc}", file=sys.stderr)
        return False
    return True


def _check(config: GatewayConfig) -> int:
    from .server import check_startup  # the policy build: heavy, and only needed here

    try:
        check_startup(config)
    except ConfigError as exc:
        print(f"kpg: configuration error: {exc}", file=sys.stderr)
        return 2
    for warning in config_warnings(config):
        print(f"kpg: warning: {config.source}: {warning}", file=sys.stderr)
    upstream = ",".join(map(str, config.upstream.bootstrap_servers)) or "an embedded broker"
    print(
        f"kpg: configuration OK ({config.source}): policy version {config.policy_version}, "
        f"listen {config.listen}, upstream {upstream}",
        flush=True,
    )
    return 0


def _workers(config: GatewayConfig, args: argparse.Namespace) -> int | None:
    """How many workers to run; None (after saying why) when the asked number cannot be."""
    if args.workers is not None and args.workers < 1:
        print("kpg: --workers: at least 1", file=sys.stderr)
        return None
    workers = args.workers or cpu_count()
    free_ports = [
        what
        for what, port in (
            ("the listen port", config.listen.port),
            ("node_port_base", config.node_port_base),
        )
        if port == 0
    ]
    if workers > 1 and free_ports:
        why = (
            f"{' and '.join(free_ports)} 0 would give each worker ports of its own; "
            "workers share fixed ones"
        )
        if args.workers is not None:
            print(f"kpg: --workers {workers}: {why}", file=sys.stderr)
            return None
        log.info("one worker: %s", why)
        return 1
    return workers


def _write_pid_file(path: Path) -> bool:
    """Write this process's pid to ``path`` (replacing what is there, a symlink included,
    never writing through it: gateway.files) and remove a previous run's reload outcome;
    False, after saying why, when it cannot (in a sticky directory such as /tmp, a file
    another user put there first cannot be replaced)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        verdict_path(path).unlink(missing_ok=True)  # a previous run's
        write_replacing(path, f"{os.getpid()}\n".encode(), 0o644)
    except OSError as exc:
        print(f"kpg: cannot write the pid file {path}: {exc}", file=sys.stderr)
        return False
    return True


def _remove_pid_file(path: Path) -> None:
    """Remove the pid file, and the reload outcome beside it, if they are still this
    process's (another gateway may have taken the path since)."""
    with contextlib.suppress(OSError):
        if _read_pid_quietly(path) == os.getpid():
            path.unlink()
            verdict_path(path).unlink(missing_ok=True)


def _read_pid_quietly(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def _pid_file(path: Path | None) -> Iterator[bool]:
    """Yields False when the pid file could not be written (kpg run then stops)."""
    if path is None:
        yield True
        return
    if not _write_pid_file(path):
        yield False
        return
    try:
        yield True
    finally:
        _remove_pid_file(path)


def _worker_config(config: GatewayConfig, args: argparse.Namespace) -> GatewayConfig:
    """A worker's view of the configuration: the embedded broker's differences when the
    supervisor runs one, its own spool directory, and no metrics listener (the supervisor
    serves the workers' metrics)."""
    if args.embedded_upstream:
        config = with_embedded_upstream(config, config.upstream.bootstrap_servers[0])
    audit = config.audit
    if audit.spool_dir is not None:
        spool_dir = worker_spool_dir(audit.spool_dir, args.worker_index)
        audit = replace(audit, spool_dir=spool_dir)
    return replace(config, metrics=None, audit=audit)


def _reload_worker(args: argparse.Namespace, overrides: dict[str, object]) -> GatewayConfig:
    return _worker_config(load(args.config, overrides, source=args.config_name), args)


def _supervise(
    config: GatewayConfig,
    workers: int,
    args: argparse.Namespace,
    overrides: dict[str, object],
    embedded: bool,
) -> int:
    """Run ``workers`` worker processes under a supervisor (gateway.supervisor)."""
    base = [
        "--upstream",
        ",".join(map(str, config.upstream.bootstrap_servers)),
        "--listen",
        str(config.listen),
        "--advertised-host",
        config.advertised_host,
        "--node-port-base",
        str(config.node_port_base),
        "--log-level",
        args.log_level,
        "--log-format",
        args.log_format,
    ]
    if args.audit_instance is not None:
        base += ["--audit-instance", args.audit_instance]
    if embedded:
        base.append("--embedded-upstream")
    config_name = str(args.config) if args.config is not None else None
    upstream = config.upstream.bootstrap_servers[0]
    if config.audit.spool_dir is not None:
        # The workers' directories' parent, which kpg audit stream reads whole: another
        # user who could write it could add a worker-<i> of forged events.
        try:
            make_private_dirs(Path(config.audit.spool_dir), "audit spool directory")
        except (UnsafePathError, OSError) as exc:
            print(f"kpg: configuration error: {config.source}: audit: {exc}", file=sys.stderr)
            return 2

    def load_copy(path: Path) -> GatewayConfig:
        # What a worker's start-up and reload read (_cmd_run, _reload_worker), from a copy.
        loaded = load(path, overrides, source=config_name)
        return with_embedded_upstream(loaded, upstream) if embedded else loaded

    supervisor = Supervisor(
        workers=workers,
        config=config,
        config_file=args.config,
        command=lambda index, fd, listener_fd, copy: worker_command(
            base, index, fd, listener_fd, copy, config_name
        ),
        load=load_copy,
        on_reload=ReloadVerdicts(args.pid_file),
    )
    try:
        supervisor.adopt()
    except ConfigError as exc:
        supervisor.close()
        print(f"kpg: configuration error: {exc}", file=sys.stderr)
        return 2

    def ready() -> None:
        address = HostPort(host=config.advertised_host, port=config.listen.port)
        print(
            f"kpg: gateway ready ({workers} workers): clients use bootstrap.servers={address}",
            flush=True,
        )
        if supervisor.metrics_port is not None and config.metrics is not None:
            print(
                f"kpg: metrics on http://{config.metrics.host}:{supervisor.metrics_port}/metrics",
                flush=True,
            )

    return asyncio.run(supervisor.run(ready))


def _listener_channel(fd: int | None) -> socket.socket | None:
    """A worker's channel to its supervisor for its listeners' sockets (``--listener-fd``),
    held by no process it starts."""
    if fd is None:
        return None
    channel = socket.socket(fileno=fd)
    channel.set_inheritable(False)
    return channel


def _announce(address: HostPort, config: GatewayConfig, metrics_port: int | None) -> None:
    print(f"kpg: gateway ready: clients use bootstrap.servers={address}", flush=True)
    if metrics_port is not None and config.metrics is not None:
        print(f"kpg: metrics on http://{config.metrics.host}:{metrics_port}/metrics", flush=True)


def _serve(
    config: GatewayConfig, reloaded: Callable[[], GatewayConfig], args: argparse.Namespace
) -> int:
    import uvloop

    from .server import Gateway, ReloadOutcome
    from .tasks import TaskSet

    worker = args.worker_index is not None
    status = os.fdopen(args.status_fd, "w", buffering=1) if args.status_fd is not None else None

    def tell(line: str) -> None:
        if status is not None:
            with contextlib.suppress(OSError):
                status.write(line.replace("\n", " ") + "\n")

    verdicts = ReloadVerdicts(None if worker else args.pid_file)

    async def reload(gateway: Gateway) -> None:
        outcome: ReloadOutcome = await gateway.reload(reloaded)
        verdict = "applied" if outcome.applied else "refused"
        tell(f"reload {verdict} {outcome.message}")
        verdicts(verdict, outcome.message)

    async def main() -> int:
        try:
            # A worker counts no reload: its supervisor counts each of the gateway's once.
            gateway = Gateway(
                config,
                reuse_port=worker,
                count_reloads=not worker,
                shared_listeners=_listener_channel(args.listener_fd),
            )
            await gateway.start()
        except ConfigError as exc:
            print(f"kpg: configuration error: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(f"kpg: cannot start: {exc}", file=sys.stderr)
            return 2
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(
            signal.SIGHUP, lambda: gateway.tasks.spawn(reload(gateway), name="reload")
        )
        # Not the gateway's tasks: those are waited for at shutdown, and these never end.
        supervised = TaskSet()
        if worker:
            supervised.spawn(watch_parent(args.parent_pid, stop.set), name="watch-parent")
            commands = worker_commands(gateway.reload_refused_by_supervisor, gateway.open_node)
            supervised.spawn(commands, "commands")
            log.info(
                "worker %d (pid %d) serving %s",
                args.worker_index,
                os.getpid(),
                gateway.bootstrap_address,
            )
            tell("ready")
        else:
            _announce(gateway.bootstrap_address, config, gateway.metrics_port)
        await stop.wait()
        await supervised.cancel_all()
        if not worker:
            print("kpg: shutting down", flush=True)
        await gateway.stop()
        return 0

    return uvloop.run(main())


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(
        getattr(args, "log_level", "INFO"),
        getattr(args, "log_format", "text"),
        worker=getattr(args, "worker_index", None),
    )
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
