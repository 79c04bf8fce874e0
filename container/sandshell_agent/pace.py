"""When the agent's loop looks for the next request without sleeping first.

In a VM whose idle CPUs halt at once (`haltpoll.guest_halt_poll_ns=0` here), a process that sleeps
in `epoll_wait` is woken tens of µs after its data came. A host that sends commands back to back (a
script, the Bot API, an eval, a benchmark) sends the next one within a fraction of a millisecond of
the last result: the loop then looks for it for up to LOOK_SECONDS without sleeping, once a
request. A request that came later than that after the last result (a model's next turn: seconds)
ends the looking until requests come back to back again, so an agent driven by a model never spins.
docs/benchmarks.md: the `true` round trip went from 1.31-1.54x the bash pipe to 1.12-1.35x.
"""

from __future__ import annotations

LOOK_SECONDS = 0.0003


class NextLook:
    def __init__(self, seconds: float = LOOK_SECONDS) -> None:
        self.seconds = seconds
        self.idle_since = -1.0  # when the loop last went idle (no command running), -1: it is not
        self.back_to_back = False  # the last request came within `seconds` of the result before it

    def request(self, now: float) -> None:
        """A command was asked for at `now`."""
        self.back_to_back = self.idle_since >= 0 and now - self.idle_since < self.seconds
        self.idle_since = -1.0

    def idle(self, now: float, quick: bool) -> float:
        """The loop is about to wait with no command running (`quick`: the last one ended within the
        agent's own look for its end): how long to look first without sleeping (0: not at all)."""
        if self.idle_since < 0:
            self.idle_since = now
        if not (quick and self.back_to_back):
            return 0.0
        self.back_to_back = False  # (once a request: an event that is not the next one ends it)
        return self.seconds
