"""Pure logic of the service: the fair generation gate and slots, and the one-sentence errors."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandshell import config
from sandshell.errors import SettingsError
from sandshell.model.types import Message, Stats
from sandshell.service.auth import MAX_SIGN_INS, SignIns, cookie_name
from sandshell.service.limits import Slots, one_sentence
from sandshell.service.models import FairGate, GatedBackend, Models


class Slow:
    """A backend that takes a while per generation and notes who generated when."""

    name = "slow"
    n_ctx = 4096
    constrained = True

    def __init__(self) -> None:
        self.order: list[str] = []
        self.params: list[dict[str, Any]] = []
        self.inside = 0
        self.most_inside = 0
        self.lock = threading.Lock()

    def count(self, messages: list[Message]) -> int:
        return 1

    def stream(self, messages: list[Message], params: dict[str, Any]) -> Iterator[str | Stats]:
        with self.lock:
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
            self.order.append(messages[0]["content"])
            self.params.append(params)
        time.sleep(0.03)
        yield "[]"
        with self.lock:
            self.inside -= 1
        yield Stats()


def _sessions(gate: FairGate, inner: Slow, names: str, turns: int) -> None:
    def session(name: str) -> None:
        backend = GatedBackend(inner, gate)
        for _ in range(turns):
            list(backend.stream([{"role": "user", "content": name}], {}))

    threads = [threading.Thread(target=session, args=(n,)) for n in names]
    for t in threads:
        t.start()
        time.sleep(0.005)  # they arrive in this order
    for t in threads:
        t.join(30)


def test_one_generation_at_a_time_served_round_robin_per_turn() -> None:
    inner = Slow()
    _sessions(FairGate(1), inner, "abc", 4)
    assert inner.most_inside == 1
    assert "".join(inner.order) == "abc" * 4  # nobody goes twice while another waits


def test_a_wider_gate_lets_that_many_generate_at_once() -> None:
    inner = Slow()
    _sessions(FairGate(2), inner, "abcd", 3)
    assert inner.most_inside == 2 and len(inner.order) == 12


def test_a_generation_broken_off_gives_its_turn_back() -> None:
    gate, inner = FairGate(1), Slow()
    stream = GatedBackend(inner, gate).stream([{"role": "user", "content": "x"}], {})
    next(stream)
    assert gate.busy == 1
    stream.close()  # as a paused or quit session drops its answer
    assert gate.busy == 0


def test_a_session_that_quits_while_waiting_leaves_the_line_at_once() -> None:
    """A stopping server quits every session; one waiting behind a long generation must see that it
    has quit at once, not wait for it and then generate once itself."""
    gate, inner, quit_b = FairGate(1), Slow(), threading.Event()
    first = GatedBackend(inner, gate).stream([{"role": "user", "content": "a"}], {})
    next(first)  # a generates (and holds the gate until its stream is closed)
    got: dict[str, object] = {}

    def wait(name: str, cancelled: threading.Event | None) -> None:
        backend = GatedBackend(inner, gate, cancelled=cancelled.is_set if cancelled else None)
        started = time.monotonic()
        got[name] = (list(backend.stream([{"role": "user", "content": name}], {})), time.monotonic() - started)

    b = threading.Thread(target=wait, args=("b", quit_b))
    c = threading.Thread(target=wait, args=("c", None))
    b.start()
    time.sleep(0.05)
    c.start()
    time.sleep(0.1)
    quit_b.set()
    b.join(2)
    assert not b.is_alive() and got["b"][0] == [], got  # type: ignore[index]
    assert got["b"][1] < 1.5, got  # type: ignore[index]  # not after a's generation: a still holds the gate
    assert gate.waiting == 1 and gate.busy == 1  # c still waits, in its place
    first.close()
    c.join(5)
    assert inner.order == ["a", "c"] and gate.busy == 0 and gate.waiting == 0


def test_openai_sessions_keep_their_own_slot_least_used_first() -> None:
    models = Models.__new__(Models)
    models.shared, models.slots, models.gate = Slow(), 2, FairGate(2)  # type: ignore[assignment]
    models._use, models._lock = Counter(), threading.Lock()
    (a, sa), (_, sb) = models.backend_for(), models.backend_for()
    assert {sa, sb} == {0, 1}
    list(a.stream([{"role": "user", "content": "a"}], {"temperature": 0.1}))
    assert models.shared.params[-1] == {"temperature": 0.1, "id_slot": sa, "cache_prompt": True}  # type: ignore[attr-defined]
    models.release(sa)
    _, sc = models.backend_for()
    assert sc == sa


def test_validation_errors_read_as_one_sentence() -> None:
    text = one_sentence([{"loc": ("body", "max_steps"), "msg": "Input should be greater than or equal to 1"}])
    assert text == "bad request: max_steps: Input should be greater than or equal to 1; see /docs"
    for odd in (
        {"type": "json_invalid"},
        {"type": "json_invalid", "loc": None, "ctx": "x"},
        {"type": "json_invalid", "loc": ("body", "field")},
    ):
        assert one_sentence([odd]) == "the request body is not valid JSON (malformed); see /docs"
    located = {"type": "json_invalid", "loc": ("body", 7), "ctx": {"error": "Expecting value"}}
    assert one_sentence([located]) == "the request body is not valid JSON (at character 7: Expecting value); see /docs"


def test_service_settings_out_of_range_are_one_sentence() -> None:
    for env in ({"SANDSHELL_MAX_SESSIONS": "0"}, {"SANDSHELL_API_BODY_LIMIT": "10"}, {"LLAMA_OPENAI_SLOTS": "-1"}):
        with pytest.raises(SettingsError, match="SANDSHELL_MAX_SESSIONS must be 1 or more"):
            config.load(env_file=None, environ=env)
    ok = config.load(env_file=None, environ={"SANDSHELL_API_BODY_LIMIT": "1MiB", "SANDSHELL_MAX_SESSIONS": "8"})
    assert (ok.service.api_body_limit, ok.service.max_sessions) == (1024 * 1024, 8)


def test_api_profiles_default_to_locked_and_a_wrong_list_is_one_sentence() -> None:
    from sandshell.service import profiles

    default = config.load(env_file=None, environ={})
    assert default.sandbox.profile == "standard" and profiles.offered(default.service) == ("locked",)
    assert (
        profiles.choose(default.service, default.sandbox, None) == "locked"
    )  # the server's own profile is not offered: the first offered
    with pytest.raises(profiles.Forbidden, match="SANDSHELL_API_PROFILES"):
        profiles.choose(default.service, default.sandbox, "standard")
    both = config.load(env_file=None, environ={"SANDSHELL_API_PROFILES": " locked, standard "})
    assert (
        profiles.choose(both.service, both.sandbox, None) == "standard"
        and profiles.choose(both.service, both.sandbox, "locked") == "locked"
    )
    for wrong in ("networked", ",", "locked,root"):
        with pytest.raises(SettingsError, match="SANDSHELL_API_PROFILES must name standard, locked or both"):
            config.load(env_file=None, environ={"SANDSHELL_API_PROFILES": wrong})


# -- the web view's sign-ins and the door ------------------------------------------------------------
def test_a_sign_in_is_random_kept_as_a_hash_revocable_and_expires(tmp_path: Path) -> None:
    path = tmp_path / ".service" / "sign-ins"
    sign_ins = SignIns(path, "token")
    one, two = sign_ins.new(), sign_ins.new()
    assert one != two and len(one) >= 40
    assert sign_ins.valid(one) and sign_ins.valid(two) and not sign_ins.valid("x") and not sign_ins.valid(None)
    assert one not in path.read_text() and path.stat().st_mode & 0o777 == 0o600
    assert SignIns(path, "token").valid(one)  # read back, as after a restart
    assert not SignIns(path, "a new token").valid(two)  # a new token ends the old sign-ins
    assert sign_ins.revoke(one) and not sign_ins.valid(one) and not SignIns(path, "token").valid(one)
    assert not sign_ins.revoke(one)
    short = SignIns(tmp_path / "short", "token", seconds=0.2)
    value = short.new()
    time.sleep(0.3)
    assert not short.valid(value)


def test_sign_ins_are_bounded_the_oldest_going_first(tmp_path: Path) -> None:
    sign_ins = SignIns(tmp_path / "sign-ins", "token")
    values = [sign_ins.new() for _ in range(MAX_SIGN_INS + 5)]
    assert not any(sign_ins.valid(v) for v in values[:5])
    assert all(sign_ins.valid(v) for v in values[5:])


def test_each_server_has_its_own_cookie_name(tmp_path: Path) -> None:
    a = config.load(env_file=None, environ={"SANDSHELL_HOME": str(tmp_path / "a")})
    b = config.load(env_file=None, environ={"SANDSHELL_HOME": str(tmp_path / "b")})
    names = {cookie_name(a.session, 8000), cookie_name(a.session, 8001), cookie_name(b.session, 8000)}
    assert len(names) == 3 and all(n.startswith("sandshell-") for n in names)
    assert cookie_name(a.session, 8000) == cookie_name(a.session, 8000)  # the same after a restart


def test_slots_never_let_more_in_than_their_size_under_a_crowd() -> None:
    slots = Slots(64)
    start = threading.Barrier(200)
    taken: list[bool] = []

    def one() -> None:
        start.wait()
        taken.append(slots.take())

    threads = [threading.Thread(target=one) for _ in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert taken.count(True) == 64 and slots.held == 64
    slots.give_back()
    assert slots.take() and not slots.take()
