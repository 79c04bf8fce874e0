"""Property-based fuzzing (bounded, runs in CI): the agent's frame parser and the host's action parser."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandshell.model import actions
from sandshell.model.actions import ParseError
from sandshell.sandbox.connection import AttachConnection
from sandshell_agent.frames import FrameError, FrameReader, encode

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.lists(st.binary(max_size=300), max_size=20))
def test_frame_reader_never_crashes_on_any_bytes(chunks: list[bytes]) -> None:
    reader = FrameReader(max_frame=128)
    for chunk in chunks:
        for item in reader.feed(chunk):
            assert isinstance(item, FrameError | dict)
            if isinstance(item, dict):
                assert isinstance(item["type"], str)


@given(st.sampled_from("[{"), st.integers(min_value=900, max_value=200_000))
@settings(max_examples=10, deadline=None)
def test_a_frame_nested_too_deeply_is_malformed_not_a_crash(bracket: str, depth: int) -> None:
    line = (bracket if bracket == "[" else '{"a":') * depth
    (item,) = FrameReader(max_frame=1 << 20).feed(line.encode() + b"\n")
    assert isinstance(item, FrameError) and item.code == "malformed"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@FUZZ
@given(
    st.lists(st.dictionaries(st.sampled_from(["type", "id", "data", "x"]), json_values, max_size=4), max_size=8),
    st.integers(min_value=1, max_value=64),
)
def test_frames_survive_any_split(frames: list[dict[str, object]], cut: int) -> None:
    frames = [{**f, "type": str(f.get("type", "t"))} for f in frames]
    data = b"".join(encode(f) for f in frames)
    reader = FrameReader(max_frame=1 << 20)
    out: list[object] = []
    for i in range(0, len(data), cut):
        out += reader.feed(data[i : i + cut])
    assert out == [json.loads(json.dumps(f)) for f in frames]


@FUZZ
@given(st.text(max_size=400))
def test_action_parser_accepts_or_explains(text: str) -> None:
    try:
        parsed = actions.parse(text)
    except ParseError as e:
        assert str(e)
        return
    assert 1 <= len(parsed) <= actions.MAX_ACTIONS


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["bash", "read", "write", "done"]),
            st.text(min_size=1, max_size=80),
            st.text(max_size=40),
            st.text(max_size=20),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_any_action_round_trips(items: list[tuple[str, str, str, str]]) -> None:
    def arg(kind: str, a: str) -> str:  # a path holds no JSON debris or controls (the parser refuses them)
        if kind in ("read", "write"):
            a = "".join(c for c in a if c not in actions.PATH_BANNED and not actions.is_control(c))
        return a if a.strip() else "x"

    made = [actions.Action(k, arg(k, a), c if k == "write" else "", m) for k, a, c, m in items]  # type: ignore[arg-type]
    assert actions.parse(actions.dumps(made)) == made
    cut = actions.dumps(made)[: len(actions.dumps(made)) // 2]
    assert all(a in made for a in actions.salvage(cut)) or actions.salvage(cut)[0].kind == "done"


@FUZZ
@given(
    st.lists(st.tuples(st.sampled_from(["stdout", "stderr"]), st.text(max_size=300)), max_size=10),
    st.integers(min_value=1, max_value=97),
)
def test_raw_output_frames_survive_any_split(chunks: list[tuple[str, str]], cut: int) -> None:
    frames = [{"type": "output", "id": "c1", "seq": i, "stream": s, "data": d} for i, (s, d) in enumerate(chunks)]
    frames.append({"type": "exit", "id": "c1", "exit_code": 0})
    data = b"".join(encode(f) for f in frames)
    bodies, at = [], 0  # where each frame's raw bytes lie in the stream
    for f in frames:
        whole = encode(f)
        at += len(whole)
        bodies.append((at - len(whole) + whole.index(b"\n") + 1, at))
    reader = FrameReader(max_frame=1 << 20)
    out: list[object] = []
    for i in range(0, len(data), cut):
        out += reader.feed(data[i : i + cut])
        fed = min(i + cut, len(data))  # the host waits for more while a flood's frame is still coming
        assert reader.coming() == next((end - fed for start, end in bodies if start <= fed < end), 0)
    expected = [
        {**f, "data": f["data"].encode("utf-8", "replace").decode("utf-8", "replace")} if "data" in f else f
        for f in frames
    ]
    assert out == expected


@FUZZ
@given(
    st.lists(st.tuples(st.sampled_from(["stdout", "stderr"]), st.text(max_size=3000)), max_size=8),
    st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=8),
    st.integers(min_value=1, max_value=4099),
    st.booleans(),
)
def test_the_engines_stream_headers_come_off_at_any_split(
    chunks: list[tuple[str, str]], pieces: list[int], cut: int, stderr: bool
) -> None:
    """Without a TTY the engine cuts the agent's stdout into pieces of any size, each behind an 8-byte
    header, with its stderr in between; the host's reader gets the agent's frames back whole."""
    frames = [{"type": "output", "id": "c1", "seq": i, "stream": s, "data": d} for i, (s, d) in enumerate(chunks)]
    frames.append({"type": "exit", "id": "c1", "exit_code": 0})
    out, stream, i = b"".join(encode(f) for f in frames), b"", 0
    while out:
        size = min(pieces[i % len(pieces)], len(out))
        stream += b"\x01\0\0\0" + size.to_bytes(4, "big") + out[:size]
        out, i = out[size:], i + 1
        if stderr and i % 3 == 0:
            stream += b"\x02\0\0\0" + (5).to_bytes(4, "big") + b"oops\n"
    conn = AttachConnection(None, "")
    conn._sync = None  # past the hello: every byte now is the agent's frames
    for at in range(0, len(stream), cut):
        conn._feed(stream[at : at + cut])
    got = list(conn._frames)
    expected = [
        {**f, "data": f["data"].encode("utf-8", "replace").decode("utf-8", "replace")} if "data" in f else f
        for f in frames
    ]
    assert got == expected
    assert not stderr or i < 3 or list(conn.stderr)[-1] == "oops"


frames = st.dictionaries(
    st.sampled_from(
        [
            "exit_code",
            "error",
            "notice",
            "timed_out",
            "signal",
            "spill_path",
            "output_bytes",
            "duration",
            "user",
            "host",
            "cwd",
            "tail",
            "path",
            "content",
            "size",
            "truncated",
            "goal",
            "system",
            "config",
            "x",
        ]
    ),
    json_values | st.integers(min_value=2**1024) | st.integers(max_value=-(2**1024)),  # past a float's range
    max_size=12,
)


@FUZZ
@given(frames)
def test_the_hosts_result_parser_takes_any_frame(frame: dict[str, object]) -> None:
    """Whatever an agent (or an attacker posing as one) sends, the host gets well-typed values or
    its own error, never a crash later when the result is shown or given to the model."""
    from sandshell.model.context import brief_command, observe_command
    from sandshell.sandbox.protocol import FileContent, ModelState, Result
    from sandshell.session import events
    from sandshell.session.transcript import render

    r = Result.from_frame("cmd", frame)
    assert r == _result_field_by_field("cmd", frame) == dataclasses.replace(r)  # (filled in one step: all there)
    assert r.return_code is None or type(r.return_code) is int
    assert all(isinstance(v, str) for v in (r.user, r.host, r.cwd, r.tail))
    assert all(v is None or isinstance(v, str) for v in (r.error, r.notice, r.signal, r.spill_path))
    r.status_line(), r.prompt(), observe_command(r, 1000), brief_command(r)
    render(events.ActionFinished(actions.Action("bash", "cmd"), "x", r, ok=r.ok))
    f = FileContent.from_frame(frame)
    assert f.content is None or isinstance(f.content, str)
    ModelState.from_frame(frame)


def _result_field_by_field(command: str, f: dict[str, Any]) -> Any:
    """What `Result.from_frame` must give, through the class's own constructor."""
    from sandshell.sandbox.protocol import Result, number

    def text(key: str) -> str | None:
        return value if isinstance(value := f.get(key), str) else None

    code = f.get("exit_code")
    flags = ("timed_out", "interrupted", "restarted", "output_limited", "truncated", "syntax_error")
    return Result(
        command,
        code if type(code) is int else None,
        **{k: f.get(k) is True for k in flags},
        error=text("error"),
        notice=text("notice"),
        signal=text("signal"),
        spill_path=text("spill_path"),
        output_bytes=number(f, "output_bytes", int),
        duration=number(f, "duration", float),
        user=text("user") or "root",
        host=text("host") or "sandbox",
        cwd=text("cwd") or "/",
        tail=text("tail") or "",
    )


def test_a_results_empty_names_are_the_defaults() -> None:
    from sandshell.sandbox.protocol import Result

    r = Result.from_frame("x", {"exit_code": 0, "user": "", "host": "", "cwd": "", "error": "", "tail": ""})
    assert (r.user, r.host, r.cwd, r.error, r.tail) == ("root", "sandbox", "/", "", "")


def test_a_number_past_a_floats_range_is_no_crash() -> None:
    """JSON's integers have no bound: a duration or a size of 400 digits raised OverflowError."""
    from sandshell.sandbox.protocol import FileContent, Result

    for huge in (10**400, -(10**400)):
        r = Result.from_frame("cmd", {"exit_code": 0, "duration": huge, "output_bytes": huge})
        assert (r.duration, r.output_bytes) == (0.0, huge if huge > 0 else 0)
        f = FileContent.from_frame({"type": "file", "path": "/x", "content": "", "size": huge})
        assert f.size == (huge if huge > 0 else 0)


JSONISH = st.text(alphabet=st.sampled_from(list('{}[]",:0123456789.eE+- \t\r\x00\\unltrfasé\ud800')), max_size=60)


@FUZZ
@given(
    st.one_of(
        JSONISH,
        st.builds(
            lambda kind, v, tail: json.dumps({"type": kind, **v}) + tail,
            st.one_of(st.text(max_size=5), st.integers()),
            st.dictionaries(
                st.text(max_size=5),
                st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5)),
                max_size=4,
            ),
            st.sampled_from(["", " ", "\t\r", "x", "{}", "]", " 1"]),
        ),
    )
)
def test_the_frame_parser_takes_what_json_takes(text: str) -> None:
    """The frame parser calls JSON's C scanner itself (not `json.loads`): it must accept exactly the
    objects with a string `type` that `json.loads` does, with the same content."""
    from sandshell_agent.frames import _parse

    line = text.encode("utf-8", "surrogatepass")
    try:
        expected = json.loads(text)
    except ValueError:
        expected = None
    got = _parse(line)
    if isinstance(expected, dict) and isinstance(expected.get("type"), str):
        assert got == expected or json.dumps(got) == json.dumps(expected), (text, got)
    else:
        assert isinstance(got, FrameError), (text, got)
