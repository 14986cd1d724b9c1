"""The open-file limit. Each client connection holds two descriptors (its own and its link to
the broker), so 10,000 idle clients need 20,000+; distributions start processes with a soft
limit of 1,024 and a much higher hard one. Like Kafka's and many servers' start scripts,
``kpg run`` raises the soft limit to the hard one before anything else, so that
``max.connections``' default (:func:`gateway.config.default_max_connections`) is derived
from the raised value."""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenFileLimit:
    before: int
    after: int
    hard: int


def raise_open_file_limit() -> OpenFileLimit:
    """Raise the soft RLIMIT_NOFILE to the hard limit and log what it is now.

    A hard limit of "unlimited" is not a value setrlimit takes for the soft limit on every
    kernel (Linux caps it at fs.nr_open): there the soft limit is left as it is.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    after = soft
    if hard != resource.RLIM_INFINITY and soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            after = hard
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, exc)
    if after != soft:
        log.info("open-file limit raised from %d to %d (the hard limit)", soft, after)
    else:
        log.info("open-file limit %s (hard %s)", _text(after), _text(hard))
    return OpenFileLimit(before=soft, after=after, hard=hard)


def _text(limit: int) -> str:
    return "unlimited" if limit == resource.RLIM_INFINITY else str(limit)
