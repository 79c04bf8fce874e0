"""The agent loop's epoll (`poller.py`), set against `selectors.EpollSelector` on real descriptors:
the same keys, masks and errors for what the agent does with it."""

from __future__ import annotations

import os
import selectors
import socket
from collections.abc import Iterator

import pytest

from sandshell_agent.poller import Poller


def _ready(sel: Poller | selectors.EpollSelector, timeout: float = 0.0) -> list[tuple[int, int, object]]:
    return sorted((key.fd, mask, key.data) for key, mask in sel.select(timeout))


def test_it_reports_what_selectors_reports() -> None:
    r, w = os.pipe()
    a, b = socket.socketpair()
    mine, theirs = Poller(), selectors.EpollSelector()
    try:
        for sel in (mine, theirs):
            sel.register(r, selectors.EVENT_READ, "pipe")
            sel.register(a, selectors.EVENT_READ | selectors.EVENT_WRITE, "sock")
        assert _ready(mine) == _ready(theirs) == [(a.fileno(), selectors.EVENT_WRITE, "sock")]
        os.write(w, b"x")
        b.send(b"y")
        assert _ready(mine) == _ready(theirs)
        assert len(_ready(mine)) == 2
        for sel in (mine, theirs):
            sel.modify(a, selectors.EVENT_READ, "sock2")
        assert _ready(mine) == _ready(theirs) == [(r, selectors.EVENT_READ, "pipe"), (a.fileno(), 1, "sock2")]
        os.close(w)  # a hang-up: reported ready for what it was registered for
        os.read(r, 1)
        assert _ready(mine) == _ready(theirs)
        assert set(mine.get_map()) == {r, a.fileno()} and mine.get_map()[r].data == "pipe"
    finally:
        mine.close()
        theirs.close()
        os.close(r)
        a.close()
        b.close()


@pytest.fixture
def piped() -> Iterator[tuple[Poller, int, int]]:
    """A Poller and a pipe's two ends, none registered yet."""
    r, w = os.pipe()
    sel = Poller()
    yield sel, r, w
    sel.close()
    os.close(r)
    os.close(w)


def test_a_timeout_waits_and_nothing_ready_is_an_empty_list(piped: tuple[Poller, int, int]) -> None:
    sel, r, _ = piped
    sel.register(r, selectors.EVENT_READ, "pipe")
    assert sel.select(0.01) == [] and sel.select(0) == []


def test_registering_twice_unknown_keys_and_bad_descriptors_raise_as_selectors_does(
    piped: tuple[Poller, int, int],
) -> None:
    sel, r, w = piped
    sel.register(r, selectors.EVENT_READ)
    with pytest.raises(KeyError):
        sel.register(r, selectors.EVENT_READ)
    with pytest.raises(KeyError):
        sel.unregister(w)
    with pytest.raises(KeyError):
        sel.modify(w, selectors.EVENT_READ)
    with pytest.raises(ValueError):
        sel.register(-1, selectors.EVENT_READ)
    with pytest.raises(ValueError):
        sel.register(w, 0)


def test_a_socket_closed_after_it_was_registered_can_still_be_unregistered() -> None:
    a, b = socket.socketpair()
    sel = Poller()
    try:
        key = sel.register(a, selectors.EVENT_READ, "client")
        fd = a.fileno()
        a.close()  # its fileno() is -1 now: found by the object it was registered as
        assert sel.unregister(a) is key and fd not in sel.get_map()
    finally:
        sel.close()
        b.close()


def test_the_loop_looks_for_the_next_request_only_while_requests_come_back_to_back() -> None:
    """pace.EagerPoll: a request within LOOK_LIMIT of the loop going idle makes the loop look for the
    next one without sleeping, for twice that gap, once; a later one (a model's next turn) or a slow
    command ends it."""
    from sandshell_agent.pace import LOOK_LIMIT, EagerPoll

    pace, t = EagerPoll(throttled=lambda: 0), 100.0
    assert pace.idle(t, quick=True) == 0.0  # the first command after a start: nothing says they come fast
    pace.request(t + 2.0)  # seconds later, as a model's turn comes
    assert pace.idle(t + 2.001, quick=True) == 0.0
    pace.request(t + 2.001 + LOOK_LIMIT / 4)  # back to back: looked for twice as long as it took
    assert pace.idle(t + 2.002, quick=True) == pytest.approx(LOOK_LIMIT / 2)
    assert pace.idle(t + 2.003, quick=True) == 0.0  # once a request: an event that was not the next one ends it
    pace.request(t + 2.003 + LOOK_LIMIT / 4)  # idle since 2.002 (its first idle turn, not its last, at 2.003): late
    assert pace.idle(t + 2.005, quick=True) == 0.0
    pace.request(t + 2.005 + LOOK_LIMIT * 0.9)  # within the limit, where twice the gap is past it: the limit
    assert pace.idle(t + 2.007, quick=False) == 0.0  # but the command was not quick: its end was waited for asleep
    pace.request(t + 2.007 + LOOK_LIMIT * 2)  # the gap past the limit
    assert pace.idle(t + 2.009, quick=True) == 0.0
    pace.request(t + 2.009 + LOOK_LIMIT * 0.9)
    assert pace.idle(t + 2.010, quick=True) == LOOK_LIMIT


def test_the_loop_does_not_look_for_a_while_once_the_cpu_limit_held_the_container_back() -> None:
    """A look spends the container's CPU: in a loop of 0.3 ms commands the looks had tripled the time
    its CPU limit held it back (docs/benchmarks.md). Once that count moves, no look for HOLD_OFF."""
    from sandshell_agent.pace import HOLD_OFF, LOOK_LIMIT, EagerPoll, Throttled

    count = [3]
    pace, t = EagerPoll(throttled=lambda: count[0]), 100.0

    def turn(at: float) -> float:  # a command, idle, another asked for just after, then idle again
        pace.request(at)
        pace.idle(at + 0.001, quick=True)
        pace.request(at + 0.001 + LOOK_LIMIT / 4)
        return pace.idle(at + 0.002, quick=True)

    assert turn(t) == pytest.approx(LOOK_LIMIT / 2)
    count[0] = 4  # held back once
    assert turn(t + 0.01) == 0.0
    assert turn(t + 0.01 + HOLD_OFF / 2) == 0.0  # still holding off, though the count stays
    assert turn(t + 0.02 + HOLD_OFF) == pytest.approx(LOOK_LIMIT / 2)
    now = t + 0.03 + HOLD_OFF
    count[0] = 5  # held back again soon after the hold ended: twice as long now
    assert turn(now) == 0.0
    assert turn(now + HOLD_OFF * 1.5) == 0.0
    assert turn(now + HOLD_OFF * 2.5) == pytest.approx(LOOK_LIMIT / 2)
    count[0] = 6  # long after: the first hold again
    later = now + 100
    assert turn(later) == 0.0 and turn(later + HOLD_OFF * 1.5) == pytest.approx(LOOK_LIMIT / 2)
    assert isinstance(Throttled()(), int)  # the real one here: the host's cgroup, or 0 without one
