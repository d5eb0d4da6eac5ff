# SPDX-License-Identifier: Apache-2.0
"""The agents' clocks: data batches whose time lies outside [now - retention, now + max skew] are
refused (acknowledged, not stored), counted and recorded as a gap; a run of CLOCK_AHEAD_RUN of them ahead of
our clock flags the host's clock between two Hellos.
"""

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

from app.agents.base import StreamBase
from app.domain.sessions import AgentSession
from app.storage import samples

log = logging.getLogger("hotpath.agents")


# Data batches in a row, each refused for lying ahead of our clock by more than the skew bound, that flag
# the host's clock as skewed between two Hellos (each Hello measures the clock itself).
CLOCK_AHEAD_RUN = 3


def ns_to_dt(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC)


class ClockChecks(StreamBase):
    def _clamp(self, ts: datetime) -> datetime:
        """Keep a reported time within the window we accept data for (a gap's time is the agent's)."""
        now = datetime.now(UTC)
        low = now - timedelta(hours=self.runtime.settings.sample_retention_hours)
        high = now + timedelta(seconds=self.runtime.settings.max_clock_skew_s)
        return min(max(ts, low), high)

    def _refuse_if_out_of_time(
        self, session: AgentSession, start_ns: int, end_ns: int, instance: str, seq: int, item: "samples.Item"
    ) -> bool:
        """Refuse (record a gap, flag the clock) a batch outside [now - retention, now + skew]."""
        settings = self.runtime.settings
        now_ns = time.time_ns()
        skew_ns = int(settings.max_clock_skew_s * 1e9)
        oldest_ns = now_ns - int(settings.sample_retention_hours * 3600e9)
        if not (end_ns > now_ns + skew_ns or start_ns < oldest_ns):
            session.ahead_run = 0
            return False
        ahead = end_ns > now_ns + skew_ns
        offset_ms = (end_ns - now_ns) // 1_000_000
        reason = (
            f"refused: the host's clock is about {offset_ms / 1000:+.0f} s ahead of the backend's"
            if ahead
            else "refused: the interval is older than the sample retention "
            f"({settings.sample_retention_hours:g} h) by the backend's clock"
        )
        at = self._clamp(ns_to_dt(max(min(start_ns, now_ns + skew_ns), oldest_ns)))
        item.gaps.append(
            dict(start=at, end=at, instance=instance, first_seq=seq, messages=1, source="backend", reason=reason)
        )
        item.refused = True
        # One batch says little about the clock: an old one may be spooled data resent after an outage, a
        # future one a bad stamp among good ones. The clock is measured from Hello at each connect; a
        # batch flags the host only as the CLOCK_AHEAD_RUN-th in a row lying ahead of our clock.
        session.ahead_run = session.ahead_run + 1 if ahead else 0
        item.clock_offset_ms = offset_ms if session.ahead_run >= CLOCK_AHEAD_RUN else None
        log.warning("host %s: %s (batch %s)", session.host_id, reason, seq)
        if item.clock_offset_ms is not None:
            task = asyncio.get_running_loop().create_task(self._publish_host(session.host_id))
            self.registry.cleanups.add(task)
            task.add_done_callback(self.registry.cleanups.discard)
        return True
