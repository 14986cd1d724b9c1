"""Replay: re-judge recorded requests with a candidate policy configuration, on Spark.

``kpg audit replay --config new.yaml --input TABLE [--since ...] [--output DIR]`` reads the
audit table (or a spool), rebuilds what each recorded decision judged from the event's
schema v2 details, and asks the candidate's policy chain (``policies.loader``: its built-in
rules and its plug-ins, loaded on the executors) again, inside a Python UDF over the items of
each request. It then lists the requests whose outcome changes: denied by the candidate but
allowed when recorded (**newly denied**), and the reverse (**newly allowed**), with counts per
rule, principal and topic.

What can be re-judged (an item is one topic or config resource of a request):

- a topic creation (``action`` ``create``) with its ``topic_spec``: partitions, replication
  factor and configs as the policies judged them (a count left to a broker default the
  gateway could not read is null, and judged as the gateway judges it: denied by a rule or
  plug-in that needs it);
- a config change (``alter_config``) with its ``config_changes``: the keys the request
  changed, before and after. A sensitive key's values are never recorded: the key is left out
  of the replay. Configs the request did not change are not recorded either, nor is a topic's
  state: a topic's change is not replayable when the candidate has a ``TopicActionPolicy``
  (it needs the state) or a ``required.configs`` rule naming a key the request did not
  change (the live gateway judged it on the topic's configs; judged without them, every such
  change read as newly denied). Nor is a BROKER change a candidate ``config`` rule judges
  when which synonym gives topics their default (``log.retention.ms`` over ``.minutes`` over
  ``.hours``) depends on one the request did not change;
- a change of client quotas (``alter_client_quotas``) or of a user's SCRAM credentials
  (``alter_scram_credentials``): the ``broker.configs`` rule judges them by who asked alone.

A creation with an explicit replica assignment is replayed as its partition count and
replica count (what the built-in rules judge of it; a ``CreateTopicPolicy`` plug-in sees
counts, not the assignment).

What the gateway decided whatever its ``policies:`` say is kept as recorded
(:data:`spark_audit.event.GATEWAY_REFUSALS`: a refusal before or instead of the policies, such
as a dynamic client config it cannot take; :data:`spark_audit.event.GATEWAY_RULES`: its own
topics, denied beside the candidate's verdicts): a replay of the deciding configuration
changes nothing.

What cannot, and is counted apart, per reason: Produce (records are not stored), deletes,
partition increases, data operations (their judgement needs the topic's state, not recorded),
the topic config changes above, v1 events (no topic spec or config changes), lifecycle events
and summaries (nothing judged), and connections the gateway closed (refused authentications,
requests refused unread: no rule judged them). The recorded outcome of an item is ``denied``
when one of its events is (SCHEMA.md, "Requests and their outcome"); a request is denied when
one of its items is.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from policies import strict_yaml
from policies.api import ConfigResource, ConfigResourceType, CreateTopicRequestMetadata
from policies.chain import CLUSTER_SETTINGS, Decision, PolicyChain
from policies.loader import PolicyConfigError, load_policy_chain
from policies.rules import BROKER_SYNONYMS, ConfigRule, RequiredConfigsRule, UnknownDefaults
from spark_audit.event import GATEWAY_REFUSALS, GATEWAY_RULES
from spark_audit.report import load_events, unread_warnings
from spark_audit.session import runs_on_a_cluster, ship_packages
from spark_audit.spreadsheet import safe_cell
from spark_audit.transforms import event_kind, filter_events, principal_name, with_topic

logger = logging.getLogger(__name__)

_RESOURCE_TYPES: Final = {
    "topic": ConfigResourceType.TOPIC,
    "broker": ConfigResourceType.BROKER,
    "broker_logger": ConfigResourceType.BROKER_LOGGER,
    "client_metrics": ConfigResourceType.CLIENT_METRICS,
    "group": ConfigResourceType.GROUP,
    "user_client": ConfigResourceType.USER_CLIENT,
}

JUDGEMENT: Final = T.StructType(
    [
        T.StructField("replayable", T.BooleanType(), False),
        T.StructField("reason", T.StringType(), True),
        T.StructField("denied_rules", T.ArrayType(T.StringType()), True),
        T.StructField("would_deny_rules", T.ArrayType(T.StringType()), True),
        T.StructField("message", T.StringType(), True),
    ]
)


class CandidateError(ValueError):
    """The candidate configuration cannot be replayed: no ``policies:``, or a bad one."""


class ExecutorsCannotJudgeError(RuntimeError):
    """The cluster's executors cannot build the candidate's policy chain: their Python lacks
    a dependency of the policies (google-re2, PyYAML) or a plug-in the candidate names."""


def load_candidate(path: str) -> dict[str, Any]:
    """The ``policies`` section of a gateway configuration file, checked by the loader, and
    its plug-ins loaded once here, so a problem shows before Spark starts work.

    :raises CandidateError: if the section is missing or invalid.
    :raises OSError: if the file cannot be read.
    """
    try:
        raw = strict_yaml.load(Path(path).read_bytes(), name=path) or {}
    except yaml.YAMLError as exc:
        raise CandidateError(f"{path}: not YAML: {exc}") from exc
    section = raw.get("policies") if isinstance(raw, Mapping) else None
    if section is None:
        raise CandidateError(f"{path}: no policies: section to replay")
    if not isinstance(section, Mapping):
        raise CandidateError(
            f"{path}: policies: is a {type(section).__name__}; it is a mapping (rules: ...), "
            "as in the gateway's configuration"
        )
    try:
        load_policy_chain(section, source=path).close()
    except PolicyConfigError as exc:
        raise CandidateError(str(exc)) from exc
    return dict(section)


# --- judging, on the executors --------------------------------------------------------------

_CHAINS: dict[str, PolicyChain] = {}


def _chain(section_json: str) -> PolicyChain:
    """One chain per executor process and candidate (plug-ins are loaded once)."""
    chain = _CHAINS.get(section_json)
    if chain is None:
        chain = load_policy_chain(json.loads(section_json), source="candidate configuration")
        _CHAINS[section_json] = chain
    return chain


def _verdicts(decision: Decision) -> dict[str, Any]:
    return {
        "replayable": True,
        "reason": None,
        "denied_rules": sorted({v.policy for v in decision.verdicts if v.outcome == "denied"}),
        "would_deny_rules": sorted(
            {v.policy for v in decision.verdicts if v.outcome == "would_deny"}
        ),
        "message": decision.message,
    }


_CLOSED_CONNECTIONS: Final = frozenset({"authenticate", "request"})
"""Actions of connections the gateway closed instead of serving (SCHEMA.md, "Refused
authentications" and "Requests refused by closing the connection"): no rule judged them."""


def _not_replayable(reason: str) -> dict[str, Any]:
    return {
        "replayable": False,
        "reason": reason,
        "denied_rules": None,
        "would_deny_rules": None,
        "message": None,
    }


def judge_item(chain: PolicyChain, item: Mapping[str, Any]) -> dict[str, Any]:
    """The candidate's judgement of one recorded item (a topic or config resource).

    ``item`` holds ``api``, ``action``, ``resource_type``, ``resource_name``, ``principal``
    (null for ANONYMOUS), ``topic_spec``, ``config_changes``, ``recorded_denied_rules`` and
    ``schema_version`` as recorded.
    """
    action = item["action"]
    if action in _CLOSED_CONNECTIONS:
        return _not_replayable(f"{action}: a connection the gateway closed, no policy judged it")
    if item["api"] == "Produce":
        return _not_replayable("Produce: the records are not stored")
    if item.get("schema_version") == 1 and action in ("create", "alter_config"):
        what = (
            "creation without a topic spec"
            if action == "create"
            else "config change without its keys"
        )
        return _not_replayable(f"{what} (v1 event)")
    recorded = item.get("recorded_denied_rules") or ()
    refused = sorted(set(recorded) & GATEWAY_REFUSALS)
    if refused:
        # the gateway refused it before (or instead of) the policies, whatever they say
        return {
            "replayable": True,
            "reason": None,
            "denied_rules": refused,
            "would_deny_rules": [],
            "message": None,
        }
    judged = _judge(chain, item)
    carried = set(recorded) & GATEWAY_RULES
    if judged["replayable"] and carried:
        # the gateway's own rules stand beside every candidate's (its own topics)
        judged["denied_rules"] = sorted(carried | set(judged["denied_rules"]))
    return judged


def _judge(chain: PolicyChain, item: Mapping[str, Any]) -> dict[str, Any]:
    action, principal = item["action"], item["principal"]
    if action == "create" and item["resource_type"] == "topic":
        spec = item["topic_spec"]
        if spec is None:
            return _not_replayable("creation without a topic spec (v1 event)")
        partitions, replication = spec["partitions"], spec["replication_factor"]
        if partitions is None or replication is None:
            # a count left to a broker default the gateway could not read: judged, as live,
            # by the policies that do not need it, and denied by those that do
            unknown = UnknownDefaults(
                topic=item["resource_name"],
                configs=dict(spec["configs"] or {}),
                num_partitions=partitions,
                replication_factor=replication,
            )
            check = chain.plan_create_topic_of_unknown_defaults(unknown, principal=principal)
            return _verdicts(chain.run(check))
        request = CreateTopicRequestMetadata(
            topic=item["resource_name"],
            num_partitions=spec["partitions"],
            replication_factor=spec["replication_factor"],
            replicas_assignments=None,
            configs=dict(spec["configs"] or {}),
        )
        return _verdicts(chain.check_create_topic(request, principal=principal))
    if action == "alter_config":
        return _judge_config_change(chain, item)
    if action in CLUSTER_SETTINGS:  # judged by who asks alone
        check = chain.plan_cluster_setting(action, item["resource_name"], principal=principal)
        return _verdicts(chain.run(check))
    return _not_replayable(f"{action}: what it was judged on is not recorded")


def _judge_config_change(chain: PolicyChain, item: Mapping[str, Any]) -> dict[str, Any]:
    changes = item["config_changes"]
    if changes is None:
        return _not_replayable("config change without its keys (v1 event)")
    resource_type = _RESOURCE_TYPES.get(item["resource_type"])
    if resource_type is None:
        return _not_replayable(f"config change on a {item['resource_type']} resource")
    known = [c for c in changes if not c["sensitive"]]
    if resource_type is ConfigResourceType.TOPIC:
        # What the gateway judged a topic's change on that the event does not hold: the
        # configs the request left as they were, and the topic's state.
        if chain.needs_topic_state:
            return _not_replayable(
                "topic config change: the candidate's TopicActionPolicy needs the topic's "
                "state (not recorded)"
            )
        recorded = {c["name"] for c in known}
        for rule in chain.rules:
            if isinstance(rule, RequiredConfigsRule) and not set(rule.configs) <= recorded:
                return _not_replayable(
                    "topic config change: a required.configs rule reads configs the "
                    "request left unchanged (not recorded)"
                )
    if resource_type is ConfigResourceType.BROKER:
        unknown = _unrecorded_synonym(chain, {c["name"]: c["after"] for c in known})
        if unknown is not None:
            return _not_replayable(
                "broker config change: which broker config gives topics their default "
                f"depends on {unknown}, which the request left unchanged (not recorded)"
            )
    before = {c["name"]: c["before"] for c in known if c["before"] is not None}
    after = {c["name"]: c["after"] for c in known if c["after"] is not None}
    decision = chain.check_alter_config(
        ConfigResource(type=resource_type, name=item["resource_name"]),
        altered={c["name"]: c["after"] for c in known},
        before=before,
        after=after,
        principal=item["principal"],
    )
    return _verdicts(decision)


def _unrecorded_synonym(chain: PolicyChain, changed: Mapping[str, str | None]) -> str | None:
    """For a BROKER resource: a broker config, not recorded, that decides which synonym a
    candidate ``config`` rule judges. The gateway judges the first synonym set after the
    change (``log.retention.ms`` over ``.minutes`` over ``.hours``), in the broker's whole
    configs; the event holds only the keys the request changed, so a change of
    ``log.retention.hours`` is judged only when ``log.retention.ms`` and ``.minutes`` were
    changed too (a deleted key hands the default to the next one). None when every such
    rule's synonym is known."""
    for rule in chain.rules:
        if not isinstance(rule, ConfigRule):
            continue
        synonyms = [s.name for s in BROKER_SYNONYMS.get(rule.config, ())]
        if not any(name in changed for name in synonyms):
            continue  # the rule does not judge this change, live or replayed
        for name in synonyms:
            if name not in changed:
                return name
            if changed[name] is not None:
                break  # set by the request: the one the broker uses
    return None


def prepare_executors(spark: SparkSession, section: Mapping[str, Any]) -> None:
    """On a cluster: ship ``spark_audit`` and ``policies`` to the executors, then build the
    candidate's chain on them once, so that a Python without the policies' dependencies
    stops the replay with their name instead of failing every task of the first job.

    :raises ExecutorsCannotJudgeError: if an executor cannot build the chain.
    """
    if not runs_on_a_cluster(spark):
        return
    ship_packages(spark, ["spark_audit", "policies"])
    section_json = json.dumps(section, sort_keys=True)

    def try_chain(_: Any) -> str | None:
        # Runs on an executor; defined here so that unpickling it imports nothing.
        import importlib

        try:
            replay = importlib.import_module("spark_audit.replay")
        except ImportError as exc:
            return f"{type(exc).__name__}: {exc}"
        try:
            replay._chain(section_json)
        except replay.PolicyConfigError as exc:  # a plug-in the executors cannot import
            return f"{type(exc).__name__}: {exc}"
        return None

    context = spark.sparkContext
    slots = max(1, context.defaultParallelism)
    problems = {p for p in context.parallelize(range(slots), slots).map(try_chain).collect() if p}
    if problems:
        raise ExecutorsCannotJudgeError(
            "the Spark executors cannot run the candidate's policies: "
            + "; ".join(sorted(problems))
            + ". Their Python (PYSPARK_PYTHON, spark.pyspark.python) needs the gateway's "
            "dependencies (pip install of this project, or of google-re2 and PyYAML) and "
            "any plug-in the candidate names; spark_audit and policies are shipped to them"
        )


def _judge_udf(section_json: str) -> Any:
    def judge(item: Any) -> dict[str, Any]:
        try:
            return judge_item(_chain(section_json), item.asDict(recursive=True))
        except ValueError as exc:  # a recorded value the domain objects refuse
            return _not_replayable(f"not a valid request: {exc}")

    return F.udf(judge, JUDGEMENT)


# --- the replay ------------------------------------------------------------------------------


def _items(events: DataFrame) -> DataFrame:
    """One row per item of each recorded request, with its recorded outcome."""
    decisions = events.where(event_kind() == "decision").withColumn(
        # A v1 event is a request of its own.
        "request_id",
        F.coalesce(F.col("request_id"), F.col("event_id")),
    )
    return decisions.groupBy("request_id", "resource_type", "resource_name").agg(
        F.min("time").alias("time"),
        F.first("api").alias("api"),
        F.first("action").alias("action"),
        F.first("principal").alias("principal"),
        F.first("client_id").alias("client_id"),
        F.first("topic").alias("topic"),
        F.first("topic_spec", ignorenulls=True).alias("topic_spec"),
        F.first("config_changes", ignorenulls=True).alias("config_changes"),
        F.min("schema_version").alias("schema_version"),
        F.array_sort(F.collect_set(F.when(F.col("verdict") == "denied", F.col("policy")))).alias(
            "recorded_denied_rules"
        ),
    )


def _names(column: str) -> Column:
    return F.array_sort(F.array_distinct(F.flatten(F.collect_list(column))))


def replay_requests(events: DataFrame, section: Mapping[str, Any]) -> DataFrame:
    """Each recorded request, judged again: one row per request with the recorded and the
    replayed outcome, the rules each denied with, and whether it could be replayed.

    ``events`` must have ``topic`` (:func:`spark_audit.transforms.with_topic`).
    """
    judge = _judge_udf(json.dumps(section, sort_keys=True))
    item_columns = [
        "api",
        "action",
        "resource_type",
        "resource_name",
        "principal",
        "topic_spec",
        "config_changes",
        "recorded_denied_rules",
        "schema_version",
    ]
    judged = _items(events).withColumn("judged", judge(F.struct(*item_columns)))
    replayable = F.col("judged.replayable")
    return judged.groupBy("request_id").agg(
        F.min("time").alias("time"),
        F.first(principal_name()).alias("principal"),
        F.first("client_id").alias("client_id"),
        F.first("api").alias("api"),
        F.array_sort(F.collect_set("topic")).alias("topics"),
        F.min(replayable.cast("int")).cast("boolean").alias("replayable"),
        F.first("judged.reason", ignorenulls=True).alias("not_replayable_because"),
        (F.size(_names("recorded_denied_rules")) > 0).alias("recorded_denied"),
        (F.size(_names("judged.denied_rules")) > 0).alias("replayed_denied"),
        _names("recorded_denied_rules").alias("recorded_rules"),
        _names("judged.denied_rules").alias("replayed_rules"),
        _names("judged.would_deny_rules").alias("replayed_would_deny_rules"),
        F.first("judged.message", ignorenulls=True).alias("replayed_message"),
    )


def changed_requests(replayed: DataFrame) -> DataFrame:
    """The replayable requests whose outcome changes, newest first."""
    change = F.when(
        ~F.col("recorded_denied") & F.col("replayed_denied"), F.lit("newly denied")
    ).when(F.col("recorded_denied") & ~F.col("replayed_denied"), F.lit("newly allowed"))
    return (
        replayed.where(F.col("replayable"))
        .withColumn("change", change)
        .where(F.col("change").isNotNull())
        .select(
            "change",
            "time",
            "request_id",
            "principal",
            "client_id",
            "api",
            F.array_join("topics", ", ").alias("topics"),
            F.array_join("recorded_rules", ", ").alias("recorded_rules"),
            F.array_join("replayed_rules", ", ").alias("replayed_rules"),
            "replayed_message",
        )
        .orderBy("change", F.desc("time"), "request_id")
    )


def _per(changed: DataFrame, dimension: str) -> DataFrame:
    """Changed requests per rule (the rule that now denies, or no longer does), principal or
    topic, split by direction."""
    frame = changed
    if dimension == "rule":
        gained = F.array_except(F.split("replayed_rules", ", "), F.split("recorded_rules", ", "))
        lost = F.array_except(F.split("recorded_rules", ", "), F.split("replayed_rules", ", "))
        frame = changed.select(
            "change",
            F.explode(F.when(F.col("change") == "newly denied", gained).otherwise(lost)).alias(
                "rule"
            ),
        )
    elif dimension == "topic":
        frame = changed.select("change", F.explode(F.split("topics", ", ")).alias("topic"))
    return (
        frame.where(F.col(dimension) != "")
        .groupBy(dimension)
        .agg(
            F.count_if(F.col("change") == "newly denied").alias("newly_denied"),
            F.count_if(F.col("change") == "newly allowed").alias("newly_allowed"),
        )
        .orderBy(F.desc(F.col("newly_denied") + F.col("newly_allowed")), dimension)
    )


def build_replay(
    spark: SparkSession,
    input_path: str,
    config_path: str,
    out_dir: str | Path,
    *,
    since: str | None = None,
    until: str | None = None,
) -> dict[str, Any]:
    """Replay the requests of ``input_path`` (table or spool) against ``config_path``'s
    policies; write ``summary.json`` and CSV files into ``out_dir``.

    :returns: the content of ``summary.json``.
    :raises CandidateError: if the candidate's policies are invalid.
    :raises ExecutorsCannotJudgeError: see :func:`prepare_executors`.
    :raises FileNotFoundError: if ``input_path`` does not exist.
    """
    started = time.monotonic()
    section = load_candidate(config_path)
    prepare_executors(spark, section)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    events = filter_events(with_topic(load_events(spark, input_path)), since=since, until=until)
    replayed = replay_requests(events.dropDuplicates(["event_id"]), section).cache()
    try:
        counts = replayed.agg(
            F.count(F.lit(1)).alias("requests"),
            F.count_if(F.col("replayable")).alias("replayed"),
        ).collect()[0]
        reasons = _rows(
            replayed.where(~F.col("replayable"))
            .groupBy(F.col("not_replayable_because").alias("reason"))
            .count()
            .orderBy(F.desc("count"), "reason")
        )
        changed = changed_requests(replayed).cache()
        try:
            reports = {"changed_requests": _rows(changed)}
            for dimension in ("rule", "principal", "topic"):
                reports[f"changes_by_{dimension}"] = _rows(_per(changed, dimension))
        finally:
            changed.unpersist()
    finally:
        replayed.unpersist()
    changes = reports["changed_requests"]
    summary: dict[str, Any] = {
        "input": input_path,
        "candidate": config_path,
        "since": since,
        "until": until,
        "generated_at": dt.datetime.now(tz=dt.UTC).isoformat(timespec="seconds"),
        "requests": counts["requests"],
        "replayed_requests": counts["replayed"],
        "not_replayable": reasons,
        "newly_denied": sum(1 for row in changes if row["change"] == "newly denied"),
        "newly_allowed": sum(1 for row in changes if row["change"] == "newly allowed"),
        # lines of the input that no request could be read from, so none was replayed
        "warnings": unread_warnings(spark, input_path),
        "reports": reports,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    for name, rows in reports.items():
        _write_csv(out / f"{name}.csv", rows)
    logger.info("replay done in %.1fs: %s", time.monotonic() - started, out)
    return summary


def _rows(frame: DataFrame) -> list[dict[str, Any]]:
    def plain(value: Any) -> Any:
        if isinstance(value, dt.datetime):
            return value.replace(tzinfo=dt.UTC).isoformat(timespec="milliseconds")
        return value

    return [{k: plain(v) for k, v in row.asDict().items()} for row in frame.collect()]


def _write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as file:
        if rows:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows({k: safe_cell(v) for k, v in row.items()} for row in rows)
