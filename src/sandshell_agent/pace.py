"""When the agent's loop looks for the next request without sleeping first.

In a VM whose idle CPUs halt at once (`haltpoll.guest_halt_poll_ns=0` here), a process that sleeps
in `epoll_wait` is woken tens of µs after its data came. A host that sends commands back to back (a
script, the Bot API, an eval, a benchmark) sends the next one within a fraction of a millisecond of
the last result. So after a quick command whose request came within LOOK_LIMIT of the loop going
idle, the loop looks for the next one without sleeping for twice that gap (at most LOOK_LIMIT), once
a request: a look that ends early costs what sleeping would have. A request that came later (a
model's next turn: seconds) ends the looking until requests come back to back again, so an agent
driven by a model never spins. A look spends the container's CPU: once its CPU limit (SANDSHELL_CPUS)
has held it back, there is none for HOLD_OFF, twice as long each time it happens again right after
(in a loop of 0.3 ms commands, near the limit already, unbounded looks triple the time held back).
With the looks, the `true` round trip is 1.14-1.26x the bash pipe where it is 1.51-1.54x without
them, on the machine docs/benchmarks.md names.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

LOOK_LIMIT = 0.0005  # the longest look, and the longest gap between going idle and a request that starts one
HOLD_OFF = 0.25  # seconds without a look once the CPU limit held the container back (CFS periods are 0.1 s),
HOLD_MOST = 16.0  # twice as long each time it did again soon after the last hold ended, up to this
# The container's CPU accounting as the kernel keeps it for its CPU limit (cgroup v2, then v1).
CPU_STAT = ("/sys/fs/cgroup/cpu.stat", "/sys/fs/cgroup/cpu/cpu.stat")


class Throttled:
    """How many times the container's CPU limit has held it back (`nr_throttled`), one pread a call
    (0 where the file is not there: no limit to meet, or none this agent can see)."""

    def __init__(self) -> None:
        self.fd = -1
        for path in CPU_STAT:
            try:
                self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                break
            except OSError:
                pass

    def __call__(self) -> int:
        if self.fd < 0:
            return 0
        try:
            text = os.pread(self.fd, 512, 0)
            at = text.index(b"nr_throttled ") + len(b"nr_throttled ")
            return int(text[at : text.index(b"\n", at)])
        except (OSError, ValueError):
            return 0


class EagerPoll:
    def __init__(self, limit: float = LOOK_LIMIT, throttled: Callable[[], int] | None = None) -> None:
        self.limit = limit
        self.idle_since = -1.0  # when the loop went idle (its first turn with no command), -1: it is not
        self.gap = math.inf  # from going idle to the last request, while it is to be looked for
        self.throttled = throttled or Throttled()
        self.seen = self.throttled()  # the count at the last look granted or held off
        self.held_until, self.hold = -math.inf, HOLD_OFF

    def request(self, now: float) -> None:
        """A command was asked for at `now`."""
        self.gap = now - self.idle_since if self.idle_since >= 0 else math.inf
        self.idle_since = -1.0

    def idle(self, now: float, quick: bool) -> float:
        """The loop is about to wait with no command running (`quick`: the last one ended within the
        agent's own look for its end): how long to look first without sleeping (0: not at all)."""
        if self.idle_since < 0:
            self.idle_since = now
        gap, self.gap = self.gap, math.inf  # (once a request: an event that is not the next one ends it)
        if not (quick and gap < self.limit) or now < self.held_until:
            return 0.0
        count = self.throttled()
        if count != self.seen:  # the CPU limit held the container back since the last look
            again = now - self.held_until < self.hold  # (soon after the last hold: near the limit still)
            self.hold = min(self.hold * 2, HOLD_MOST) if again else HOLD_OFF
            self.seen, self.held_until = count, now + self.hold
            return 0.0
        return min(self.limit, 2 * gap)
