"""``kpg``: the gateway's command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from .config import ConfigError, GatewayConfig, HostPort, load, with_embedded_upstream
from .embedded import EmbeddedBroker, EmbeddedBrokerError
from .logs import LOG_FORMATS
from .logs import configure as configure_logging

log = logging.getLogger("kpg")


def _run_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "run",
        help="run the gateway",
        description=(
            "Run the gateway. Clients point bootstrap.servers at the address it prints. "
            "With no upstream configured it starts an embedded Tansu broker on a free "
            "loopback port and fronts it. Flags override the config file."
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
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log lines at this level and above go to stderr (default: INFO)",
    )
    run.add_argument(
        "--log-format",
        default="text",
        choices=LOG_FORMATS,
        help="text lines, or one JSON object per line (time, level, logger, message, "
        "exception) for a log pipeline (default: text)",
    )
    run.set_defaults(func=_cmd_run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kpg", description="kafka-policy-gateway: a policy gateway for Apache Kafka."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _run_parser(sub)
    from spark_audit.cli import add_audit_commands

    from .configs_cli import add_configs_command
    from .tools import add_commands

    add_commands(sub)
    add_configs_command(sub)
    add_audit_commands(sub)
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    overrides = {
        "upstream.bootstrap_servers": args.upstream,
        "listen": args.listen,
        "advertised_host": args.advertised_host,
        "node_port_base": args.node_port_base,
        "metrics": args.metrics,
    }
    try:
        config = load(args.config, overrides)
    except ConfigError as exc:
        print(f"kpg: configuration error: {exc}", file=sys.stderr)
        return 2
    embedded: EmbeddedBroker | None = None
    if not config.upstream.bootstrap_servers:
        embedded = EmbeddedBroker()
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
    try:
        return _serve(config)
    finally:
        if embedded is not None:
            embedded.stop()


def _serve(config: GatewayConfig) -> int:
    import uvloop

    from .server import Gateway

    async def main() -> int:
        try:
            gateway = Gateway(config)
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
        address: HostPort = gateway.bootstrap_address
        print(f"kpg: gateway ready: clients use bootstrap.servers={address}", flush=True)
        if gateway.metrics_port is not None and config.metrics is not None:
            print(
                f"kpg: metrics on http://{config.metrics.host}:{gateway.metrics_port}/metrics",
                flush=True,
            )
        await stop.wait()
        print("kpg: shutting down", flush=True)
        await gateway.stop()
        return 0

    return uvloop.run(main())


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(getattr(args, "log_level", "INFO"), getattr(args, "log_format", "text"))
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
