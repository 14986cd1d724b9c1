"""Policies: what may be done to topics, configs and records, decided without I/O.

* :mod:`policies.api` — the plug-in interfaces (Kafka's policy interfaces, Python style) and the
  frozen values they are given.
* :mod:`policies.rules` — the built-in rules a platform team sets in YAML.
* :mod:`policies.chain` — :class:`~policies.chain.PolicyChain`, the one object the gateway asks;
  it returns a :class:`~policies.chain.Decision` per topic or resource.
* :mod:`policies.loader` — builds the chain from the ``policies:`` section of the config.
* :mod:`policies.manifest` — checks a topic manifest with no cluster.

Contracts, stated once:

* Order: built-in rules, then the old CreateTopicPolicy / AlterConfigPolicy (run in the
  topic-action flow, as KIP-201's adapter does), then AlterConfigV2Policy, then
  TopicActionPolicy. Everything that applies is consulted; the client sees the first
  enforced denial's message.
* Fail closed: a plug-in that raises anything but ``PolicyViolation``, takes longer than the
  timeout, or finds every policy thread busy, denies. Nothing is skipped silently.
* Dry-run rules and plug-ins record ``would_deny`` and never deny.
* No I/O here beyond importing plug-in classes at start-up, no asyncio, no kio, no gateway.
  Plug-in calls run on the chain's one bounded pool of threads; the gateway awaits them
  without blocking its event loop (``gateway.policy_runner``), and a check made of built-in
  rules alone never leaves the caller's thread.
"""
