"""Task families for training data: each makes a goal, its setup, a check and a solution from a seed.

A family is a function of a `random.Random`; the same seed gives the same task. Every task says
its goal in one of several wordings, with names and contents drawn from pools, so the model
learns the skill, not one sentence. A solution is a list of answers (one list of actions a
turn, after the session's intro); answers that look first, act, and end with `done` and the
result are the shape taught. Nothing here is taken from the shipped suite in `tasks/`:
`training/overlap.py` checks that no goal or command is shared and measures n-gram overlap.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Answer = list[dict[str, Any]]


@dataclass
class Spec:
    """One generated task: what the model is told, how the sandbox is prepared and checked, and a solution."""

    family: str
    goal: str
    check: str
    answers: list[Answer]
    setup: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # exported in the shell before the session


WORDS = [
    "apple",
    "banana",
    "cherry",
    "delta",
    "echo",
    "falcon",
    "garnet",
    "harbor",
    "island",
    "jungle",
    "kettle",
    "lemon",
    "marble",
    "nectar",
    "ocean",
    "pepper",
    "quartz",
    "river",
    "saddle",
    "timber",
    "umber",
    "velvet",
    "willow",
    "xenon",
    "yellow",
    "zephyr",
    "amber",
    "birch",
    "cobalt",
    "dune",
    "ember",
    "fjord",
    "glacier",
    "hazel",
    "indigo",
    "juniper",
    "kayak",
    "lantern",
    "meadow",
    "nimbus",
    "orchid",
    "pebble",
    "quill",
    "raven",
    "sierra",
    "tundra",
    "violet",
    "walnut",
    "comet",
    "maple",
    "cedar",
    "onyx",
    "tulip",
    "basil",
    "coral",
    "frost",
    "storm",
]
STEMS = [
    "a",
    "b",
    "x",
    "f",
    "report",
    "notes",
    "data",
    "items",
    "list",
    "records",
    "entries",
    "input",
    "words",
    "values",
    "inventory",
    "fruits",
    "names",
    "cities",
    "tasks",
    "scores",
    "log",
    "events",
    "lines",
    "results",
    "sample",
    "batch",
    "queue",
    "todo",
    "readings",
    "measures",
]
DIRS = [
    "docs",
    "files",
    "inbox",
    "stuff",
    "assets",
    "photos",
    "reports",
    "backup",
    "store",
    "drafts",
    "logs",
    "archive",
    "media",
    "queue",
    "src",
]
OUTS = ["answer", "result", "out", "output", "count", "total", "value", "info", "summary", "reply", "found"]
EXTS = ("txt", "txt", "txt", "dat", "list", "log", "text")


def pick(rng: random.Random, pool: tuple[str, ...] | list[str], k: int = 1) -> list[str]:
    return rng.sample(list(pool), k)


def fname(rng: random.Random, pool: list[str] | None = None, ext: str | None = None) -> str:
    stem = rng.choice(pool or STEMS)
    if rng.random() < 0.3:
        stem += rng.choice(["_", "-", ""]) + rng.choice(["a", "b", "1", "2", "new", "old", "v2", "x"])
    return f"{stem}.{ext or rng.choice(EXTS)}"


def two_files(rng: random.Random, out_ext: str = "txt") -> tuple[str, str]:
    src = "/app/" + fname(rng)
    while True:
        dst = "/app/" + fname(rng, OUTS, out_ext)
        if dst != src:
            return src, dst


def put(path: str, text: str) -> str:
    """A setup command that writes `text` into `path` exactly."""
    folder = path.rsplit("/", 1)[0]
    return f"mkdir -p {folder} && printf '%s' {shlex.quote(text)} > {path}"


def lines_of(rng: random.Random, n: int) -> list[str]:
    kind = rng.random()
    if kind < 0.4:
        return [rng.choice(WORDS) for _ in range(n)]
    if kind < 0.7:
        return [str(rng.randint(1, 999)) for _ in range(n)]
    return [f"{rng.choice(WORDS)} {rng.choice(WORDS)} {rng.randint(1, 99)}" for _ in range(n)]


def same_text(path: str, expected: str) -> str:
    """A check: the file holds `expected` (surrounding whitespace ignored)."""
    return f'[ "$(tr -d "[:space:]" < {path})" = {shlex.quote("".join(expected.split()))} ]'


def say(rng: random.Random, *options: str) -> str:
    return rng.choice(options)


def done(rng: random.Random, result: str) -> Answer:
    return [{"done": result}]


def bash(cmd: str) -> Answer:
    return [{"bash": cmd}]


def shown(cmd: str, dst: str) -> str:
    """`cmd`, then print what it wrote: the `done` that follows reports a result the model has seen."""
    return f"{cmd} && cat {dst}"


# -- files ------------------------------------------------------------------------------------------
def write_word(rng: random.Random) -> Spec:
    word = rng.choice([*WORDS, "ok", "yes", "ready", "42", "done", "hi", "pass", "green"])
    path = "/app/" + fname(rng, OUTS + STEMS)
    goal = say(
        rng,
        f"Write the word {word} into the file {path}.",
        f"Put the text {word} in {path}.",
        f"Create the file {path} containing the single word {word}.",
        f"Save {word} to {path}.",
        f"Make {path} contain the word {word}.",
    )
    if rng.random() < 0.6:
        act: Answer = [{"write": path, "content": word + "\n"}]
    else:
        act = bash(f"echo {word} > {path}")
    return Spec("write_word", goal, f"grep -qx {word} {path}", [act, done(rng, f"wrote {word} into {path}")])


def write_lines(rng: random.Random) -> Spec:
    items = pick(rng, WORDS, rng.randint(2, 4))
    path = "/app/" + fname(rng, STEMS)
    listed = ", ".join(items[:-1]) + " and " + items[-1]
    goal = say(
        rng,
        f"Create {path} with the lines {listed}, one per line.",
        f"Write {listed} into {path}, each on its own line.",
    )
    content = "\n".join(items) + "\n"
    check = f'[ "$(cat {path})" = {shlex.quote(content.rstrip())} ]'
    return Spec(
        "write_lines", goal, check, [[{"write": path, "content": content}], done(rng, f"{path} has {len(items)} lines")]
    )


def copy_file(rng: random.Random) -> Spec:
    src = "/app/" + fname(rng)
    dst = "/app/" + say(rng, "copy", "backup", "dup", "second", "clone") + "_" + src.rsplit("/", 1)[1]
    if rng.random() < 0.3:
        d = rng.choice(DIRS)
        dst = f"/app/{d}/{src.rsplit('/', 1)[1]}"
        setup = [put(src, "\n".join(lines_of(rng, 3)) + "\n"), f"mkdir -p /app/{d}"]
    else:
        setup = [put(src, "\n".join(lines_of(rng, 3)) + "\n")]
    goal = say(rng, f"Make a copy of {src} at {dst}.", f"Copy {src} to {dst}.", f"Duplicate the file {src} as {dst}.")
    check = f"cmp -s {src} {dst}"
    return Spec("copy_file", goal, check, [bash(f"cp {src} {dst}"), done(rng, f"copied {src} to {dst}")], setup)


def move_file(rng: random.Random) -> Spec:
    src = "/app/" + fname(rng)
    dst = "/app/" + fname(rng, OUTS)
    if dst == src:
        dst = "/app/moved_" + src.rsplit("/", 1)[1]
    text = rng.choice(WORDS) + "\n"
    goal = say(rng, f"Rename {src} to {dst}.", f"Move the file {src} to {dst}.", f"Give {src} the new name {dst}.")
    check = f"[ ! -e {src} ] && grep -qx {text.strip()} {dst}"
    return Spec("move_file", goal, check, [bash(f"mv {src} {dst}"), done(rng, f"renamed to {dst}")], [put(src, text)])


def delete_file(rng: random.Random) -> Spec:
    names = list(dict.fromkeys(fname(rng) for _ in range(4)))
    gone, keep = names[0], names[1:]
    setup = [put(f"/app/{n}", rng.choice(WORDS) + "\n") for n in names]
    goal = say(
        rng,
        f"Remove the file /app/{gone}.",
        f"Delete /app/{gone} but leave the other files alone.",
        f"Get rid of /app/{gone}.",
    )
    check = f"[ ! -e /app/{gone} ] && " + " && ".join(f"[ -f /app/{k} ]" for k in keep)
    return Spec("delete_file", goal, check, [bash(f"rm /app/{gone}"), done(rng, f"deleted /app/{gone}")], setup)


def touch_file(rng: random.Random) -> Spec:
    path = (
        "/app/"
        + rng.choice(["flag", "marker", "lock", "started", "ok", "go", "signal"])
        + rng.choice(["", ".txt", ".done", ".lock"])
    )
    goal = say(
        rng,
        f"Make an empty file called {path}.",
        f"Create the empty file {path}.",
        f"Touch {path} so that it exists and is empty.",
    )
    return Spec(
        "touch_file", goal, f"[ -f {path} ] && [ ! -s {path} ]", [bash(f"touch {path}"), done(rng, f"created {path}")]
    )


def make_dirs(rng: random.Random) -> Spec:
    parts = pick(rng, DIRS, rng.randint(1, 3))
    path = "/app/" + "/".join(parts)
    goal = say(
        rng, f"Create the folder {path}.", f"Make a directory at {path}.", f"I need a directory {path}; make it."
    )
    return Spec("make_dirs", goal, f"[ -d {path} ]", [bash(f"mkdir -p {path}"), done(rng, f"made {path}")])


def append_line(rng: random.Random) -> Spec:
    path = "/app/" + fname(rng)
    start = lines_of(rng, rng.randint(1, 4))
    word = rng.choice(WORDS)
    goal = say(
        rng,
        f"Append the line {word} to {path}.",
        f"Add {word} as a new last line of {path}.",
        f"Put one more line, {word}, at the end of {path}.",
    )
    check = f'[ "$(tail -n 1 {path})" = {word} ] && [ $(wc -l < {path}) -eq {len(start) + 1} ]'
    return Spec(
        "append_line",
        goal,
        check,
        [bash(f"echo {word} >> {path}"), done(rng, f"appended {word}")],
        [put(path, "\n".join(start) + "\n")],
    )


def replace_word(rng: random.Random) -> Spec:
    path = "/app/" + fname(rng)
    old, new = pick(rng, WORDS, 2)
    text = f"{rng.choice(WORDS)} {old} {rng.choice(WORDS)}\n{rng.choice(WORDS)}\n"
    goal = say(
        rng,
        f"Change every {old} in {path} to {new}.",
        f"Replace {old} with {new} in the file {path}.",
        f"In {path}, substitute {new} for {old}.",
    )
    check = f"grep -q {new} {path} && ! grep -q {old} {path}"
    turns = [bash(f"sed -i 's/{old}/{new}/g' {path}"), done(rng, f"replaced {old} with {new}")]
    if rng.random() < 0.4:
        turns.insert(0, bash(f"cat {path}"))
    return Spec("replace_word", goal, check, turns, [put(path, text)])


def symlink(rng: random.Random) -> Spec:
    src = "/app/" + fname(rng)
    link = "/app/" + rng.choice(["current", "latest", "link", "main", "alias"])
    goal = say(rng, f"Create a symbolic link {link} that points to {src}.", f"Make {link} a symlink to {src}.")
    check = f'[ -L {link} ] && [ "$(readlink -f {link})" = {src} ]'
    return Spec("symlink", goal, check, [bash(f"ln -s {src} {link}"), done(rng, f"{link} -> {src}")], [put(src, "x\n")])


def chmod_file(rng: random.Random) -> Spec:
    path = "/app/" + rng.choice(["deploy", "setup", "start", "job", "task", "tool"]) + ".sh"
    setup = [put(path, "#!/bin/sh\necho hi\n"), f"chmod 644 {path}"]
    if rng.random() < 0.6:
        goal = say(rng, f"Give {path} execute permission.", f"Allow {path} to be run directly (make it executable).")
        return Spec(
            "chmod_file", goal, f"[ -x {path} ]", [bash(f"chmod +x {path}"), done(rng, f"{path} is executable")], setup
        )
    mode = rng.choice(["600", "640", "700", "755", "444"])
    goal = f"Set the permissions of {path} to {mode}."
    check = f'[ "$(stat -c %a {path})" = {mode} ]'
    return Spec("chmod_file", goal, check, [bash(f"chmod {mode} {path}"), done(rng, f"mode {mode}")], setup)


# -- text and numbers ---------------------------------------------------------------------------------
def count_lines(rng: random.Random) -> Spec:
    src, dst = two_files(rng)
    n = rng.randint(3, 60)
    goal = say(
        rng,
        f"How many lines does {src} have? Write the number into {dst}.",
        f"Write the number of lines of {src} into {dst}.",
        f"Save the line count of {src} in {dst}.",
        f"Find out how many lines {src} contains and put that number in {dst}.",
    )
    cmd = shown(f"wc -l < {src} > {dst}", dst)
    return Spec(
        "count_lines",
        goal,
        same_text(dst, str(n)),
        [bash(cmd), done(rng, f"{n} lines")],
        [put(src, "\n".join(lines_of(rng, n)) + "\n")],
    )


def count_words(rng: random.Random) -> Spec:
    src, dst = two_files(rng)
    words = [rng.choice(WORDS) for _ in range(rng.randint(4, 30))]
    text = "\n".join(" ".join(words[i : i + 5]) for i in range(0, len(words), 5)) + "\n"
    goal = say(
        rng, f"Count the words in {src} and write the count into {dst}.", f"Write how many words {src} has into {dst}."
    )
    return Spec(
        "count_words",
        goal,
        same_text(dst, str(len(words))),
        [bash(shown(f"wc -w < {src} > {dst}", dst)), done(rng, f"{len(words)} words")],
        [put(src, text)],
    )


def count_matching(rng: random.Random) -> Spec:
    src, dst = two_files(rng)
    key = rng.choice(["WARN", "FAIL", "timeout", "denied", "user=bob", "GET", "POST", "retry", "CRIT"])
    others = ["INFO ok", "DEBUG tick", "INFO started", "DEBUG cache hit", "INFO done"]
    lines = [
        f"{rng.choice(['10:01', '10:02', '11:30', '12:00'])} {key} {rng.choice(WORDS)}"
        for _ in range(rng.randint(1, 9))
    ]
    lines += [f"{rng.choice(['09:00', '09:15'])} {rng.choice(others)}" for _ in range(rng.randint(2, 9))]
    rng.shuffle(lines)
    n = sum(key in ln for ln in lines)
    goal = say(
        rng,
        f"How many lines of {src} mention {key}? Write the number into {dst}.",
        f"Write the number of lines containing {key} in {src} into {dst}.",
    )
    return Spec(
        "count_matching",
        goal,
        same_text(dst, str(n)),
        [bash(shown(f"grep -c '{key}' {src} > {dst}", dst)), done(rng, f"{n} lines contain {key}")],
        [put(src, "\n".join(lines) + "\n")],
    )


def count_in_dir(rng: random.Random) -> Spec:
    d = "/app/" + rng.choice(DIRS)
    dst = "/app/" + fname(rng, OUTS, "txt")
    n = rng.randint(1, 12)
    ext = rng.choice(["txt", "log", "csv", "md", "jpg"])
    setup = [f"mkdir -p {d} && for i in $(seq 1 {n}); do echo $i > {d}/item$i.{ext}; done"]
    if rng.random() < 0.5:
        m = rng.randint(1, 5)
        other = "png" if ext != "png" else "gif"
        setup.append(f"for i in $(seq 1 {m}); do echo $i > {d}/extra$i.{other}; done")
        goal = f"Count the .{ext} files in {d} and write the number into {dst}."
        return Spec(
            "count_in_dir",
            goal,
            same_text(dst, str(n)),
            [bash(shown(f"ls {d}/*.{ext} | wc -l > {dst}", dst)), done(rng, f"{n} .{ext} files")],
            setup,
        )
    goal = say(
        rng,
        f"How many files are in {d}? Write the number into {dst}.",
        f"Write the number of files in the directory {d} into {dst}.",
    )
    return Spec(
        "count_in_dir",
        goal,
        same_text(dst, str(n)),
        [bash(shown(f"ls {d} | wc -l > {dst}", dst)), done(rng, f"{n} files")],
        setup,
    )


def sort_file(rng: random.Random) -> Spec:
    src, dst = two_files(rng)
    numeric = rng.random() < 0.4
    items = (
        [str(rng.randint(1, 500)) for _ in range(rng.randint(4, 9))] if numeric else pick(rng, WORDS, rng.randint(4, 9))
    )
    how = say(rng, "", "in reverse order ") if not numeric else say(rng, "from smallest to largest ", "largest first ")
    flags = "-n" if numeric and "smallest" in how else "-rn" if numeric else "-r" if how else ""
    goal = say(
        rng,
        f"Sort the lines of {src} {how}and save them into {dst}.",
        f"Write the lines of {src}, sorted {how}into {dst}.",
    )
    goal = " ".join(goal.split())
    expected = (
        sorted(items, key=int, reverse=how.startswith("largest")) if numeric else sorted(items, reverse=bool(how))
    )
    check = f'[ "$(cat {dst})" = {shlex.quote(chr(10).join(expected))} ]'
    cmd = f"sort {flags} {src} > {dst}".replace("  ", " ")
    return Spec(
        "sort_file", goal, check, [bash(cmd), done(rng, f"sorted into {dst}")], [put(src, "\n".join(items) + "\n")]
    )


def head_tail(rng: random.Random) -> Spec:
    src, dst = two_files(rng)
    items = lines_of(rng, rng.randint(8, 20))
    k = rng.randint(1, 5)
    first = rng.random() < 0.5
    which = "first" if first else "last"
    goal = say(
        rng, f"Write the {which} {k} lines of {src} into {dst}.", f"Save the {which} {k} lines of {src} as {dst}."
    )
    expected = items[:k] if first else items[-k:]
    check = f'[ "$(cat {dst})" = {shlex.quote(chr(10).join(expected))} ]'
    cmd = f"{'head' if first else 'tail'} -n {k} {src} > {dst}"
    return Spec(
        "head_tail",
        goal,
        check,
        [bash(cmd), done(rng, f"{which} {k} lines saved")],
        [put(src, "\n".join(items) + "\n")],
    )


def nth_line(rng: random.Random) -> Spec:
    src, dst = two_files(rng)
    items = lines_of(rng, rng.randint(5, 15))
    k = rng.randint(2, len(items))
    goal = say(
        rng, f"Write line {k} of {src} into {dst}.", f"What is on line number {k} of {src}? Save that line to {dst}."
    )
    check = f'[ "$(cat {dst})" = {shlex.quote(items[k - 1])} ]'
    return Spec(
        "nth_line",
        goal,
        check,
        [bash(shown(f"sed -n '{k}p' {src} > {dst}", dst)), done(rng, items[k - 1])],
        [put(src, "\n".join(items) + "\n")],
    )


def sum_numbers(rng: random.Random) -> Spec:
    src, dst = two_files(rng)
    nums = [rng.randint(1, 200) for _ in range(rng.randint(3, 10))]
    goal = say(
        rng,
        f"{src} has one number a line. Write their total into {dst}.",
        f"Compute the sum of the numbers in {src} and save it to {dst}.",
    )
    cmd = say(
        rng,
        f"awk '{{t += $1}} END {{print t}}' {src} > {dst}",
        f"paste -sd+ {src} | bc > {dst}" if False else f"awk '{{n += $1}} END {{print n}}' {src} > {dst}",
    )
    return Spec(
        "sum_numbers",
        goal,
        same_text(dst, str(sum(nums))),
        [bash(shown(cmd, dst)), done(rng, f"the sum is {sum(nums)}")],
        [put(src, "\n".join(map(str, nums)) + "\n")],
    )


def min_max(rng: random.Random) -> Spec:
    src, dst = two_files(rng)
    nums = rng.sample(range(1, 1000), rng.randint(4, 12))
    big = rng.random() < 0.5
    goal = say(
        rng,
        f"Find the {'largest' if big else 'smallest'} number in {src} and write it into {dst}.",
        f"Write the {'maximum' if big else 'minimum'} of the numbers in {src} into {dst}.",
    )
    value = max(nums) if big else min(nums)
    cmd = f"sort -n {src} | {'tail' if big else 'head'} -n 1 > {dst}"
    return Spec(
        "min_max",
        goal,
        same_text(dst, str(value)),
        [bash(shown(cmd, dst)), done(rng, str(value))],
        [put(src, "\n".join(map(str, nums)) + "\n")],
    )


def file_size(rng: random.Random) -> Spec:
    src, dst = two_files(rng)
    size = rng.randint(10, 5000)
    goal = say(
        rng, f"Write the size of {src} in bytes into {dst}.", f"How many bytes is {src}? Put the number in {dst}."
    )
    return Spec(
        "file_size",
        goal,
        same_text(dst, str(size)),
        [bash(shown(f"stat -c %s {src} > {dst}", dst)), done(rng, f"{size} bytes")],
        [f"head -c {size} /dev/urandom > {src}"],
    )


def find_word(rng: random.Random) -> Spec:
    d = "/app/" + rng.choice(DIRS)
    dst = "/app/" + fname(rng, OUTS, "txt")
    n = rng.randint(4, 15)
    k = rng.randint(1, n)
    token = f"{rng.choice(['KEY', 'TOKEN', 'MAGIC', 'CODE', 'PIN'])}-{rng.randint(100, 99999)}"
    setup = [
        f'mkdir -p {d} && for i in $(seq 1 {n}); do echo "line $i" > {d}/file$i.txt; done',
        f"echo {token} >> {d}/file{k}.txt",
    ]
    goal = say(
        rng,
        f"Which file in {d} contains {token}? Write its full path into {dst}.",
        f"Find the file under {d} that mentions {token} and save its path to {dst}.",
    )
    check = f"[ \"$(tr -d '[:space:]' < {dst})\" = {d}/file{k}.txt ]"
    return Spec(
        "find_word",
        goal,
        check,
        [bash(shown(f"grep -rl {token} {d} > {dst}", dst)), done(rng, f"{d}/file{k}.txt")],
        setup,
    )


def biggest_file(rng: random.Random) -> Spec:
    d = "/app/" + rng.choice(DIRS)
    dst = "/app/" + fname(rng, OUTS, "txt")
    names = list(dict.fromkeys(rng.choice(WORDS) + ".bin" for _ in range(5)))
    sizes = rng.sample(range(10, 9000), len(names))
    big = rng.random() < 0.6
    target = names[sizes.index(max(sizes) if big else min(sizes))]
    setup = [f"mkdir -p {d}"] + [f"head -c {s} /dev/zero > {d}/{n}" for n, s in zip(names, sizes, strict=True)]
    goal = f"Write the name of the {'biggest' if big else 'smallest'} file in {d} into {dst}."
    cmd = f"ls -S {d} | {'head' if big else 'tail'} -n 1 > {dst}"
    return Spec("biggest_file", goal, f"grep -q {target} {dst}", [bash(shown(cmd, dst)), done(rng, target)], setup)


def change_case(rng: random.Random, upper: bool) -> Spec:
    """Both ways between small and capital letters: one family each, so each is drawn as often."""
    src, dst = two_files(rng)
    words = " ".join(pick(rng, WORDS, rng.randint(2, 5)))
    before, after = (words, words.upper()) if upper else (words.upper(), words)
    if upper:
        goal = say(
            rng,
            f"Write the text of {src} in capital letters into {dst}.",
            f"Convert {src} to upper case and save the result as {dst}.",
        )
    else:
        goal = say(
            rng,
            f"Write the text of {src} in small letters into {dst}.",
            f"Convert {src} to lower case and save it as {dst}.",
        )
    check = f'[ "$(cat {dst})" = {shlex.quote(after)} ]'
    sets = "'a-z' 'A-Z'" if upper else "'A-Z' 'a-z'"
    return Spec(
        "upper_case" if upper else "lower_case",
        goal,
        check,
        [bash(shown(f"tr {sets} < {src} > {dst}", dst)), done(rng, after)],
        [put(src, before + "\n")],
    )


def upper_case(rng: random.Random) -> Spec:
    return change_case(rng, upper=True)


def unique_lines(rng: random.Random) -> Spec:
    src, dst = two_files(rng)
    base = pick(rng, WORDS, rng.randint(3, 6))
    items = base + [rng.choice(base) for _ in range(rng.randint(2, 6))]
    rng.shuffle(items)
    goal = say(
        rng,
        f"Write each distinct line of {src} once, sorted, into {dst}.",
        f"Remove the duplicate lines of {src} and save the sorted result to {dst}.",
    )
    check = f'[ "$(cat {dst})" = {shlex.quote(chr(10).join(sorted(set(items))))} ]'
    return Spec(
        "unique_lines",
        goal,
        check,
        [bash(f"sort {src} | uniq > {dst}"), done(rng, f"wrote the distinct lines into {dst}")],
        [put(src, "\n".join(items) + "\n")],
    )


# -- the system, the environment, processes -----------------------------------------------------------
COMMANDS = [
    ("hostname", "the host name of this machine", "hostname"),
    ("uname -m", "the machine architecture", "uname -m"),
    ("uname -s", "the kernel name", "uname -s"),
    ("id -u", "the numeric user id", "id -u"),
    ("id -un", "the user name you run as", "id -un"),
    ("nproc", "the number of CPUs", "nproc"),
    ("cat /etc/debian_version", "the Debian version", "cat /etc/debian_version"),
    ("pwd", "the current directory", "pwd"),
    ("bash --version | head -n 1", "the first line of bash --version", "bash --version | head -n 1"),
    ("getconf PAGESIZE", "the memory page size", "getconf PAGESIZE"),
    ("ls / | wc -l", "the number of entries in /", "ls / | wc -l"),
    ("git --version", "the git version", "git --version"),
    ("jq --version", "the version of jq", "jq --version"),
    ("echo $HOME", "the home directory of the current user", "echo $HOME"),
    ("echo $SHELL", "the login shell", "echo $SHELL"),
    ("head -n 1 /etc/passwd", "the first line of /etc/passwd", "head -n 1 /etc/passwd"),
]


def command_output(rng: random.Random) -> Spec:
    cmd, what, ref = rng.choice(COMMANDS)
    dst = (
        "/app/"
        + rng.choice(["info", "sys", "host", "answer", "fact", "value", "out"])
        + rng.choice(["", "_1", "2"])
        + ".txt"
    )
    goal = say(
        rng,
        f"Write {what} (what `{cmd}` prints) into {dst}.",
        f"Save the output of {cmd} to {dst}.",
        f"Find {what} and write it into {dst}.",
        f"Put {what} in the file {dst}.",
    )
    act = bash(say(rng, f"{cmd} > {dst}", f"{cmd} > {dst} && cat {dst}"))
    return Spec("command_output", goal, f'[ "$(cat {dst})" = "$({ref})" ]', [act, done(rng, f"saved {what} in {dst}")])


def env_var(rng: random.Random) -> Spec:
    name = rng.choice(["APP_MODE", "DEPLOY_ENV", "SERVICE_NAME", "BUILD_ID", "REGION", "TEAM", "API_LEVEL", "COLOR"])
    value = rng.choice(WORDS) + rng.choice(["", str(rng.randint(1, 99))])
    dst = "/app/" + fname(rng, OUTS, "txt")
    goal = say(
        rng, f"Write the value of the environment variable {name} into {dst}.", f"Save what ${name} is set to in {dst}."
    )
    return Spec(
        "env_var",
        goal,
        same_text(dst, value),
        [bash(shown(f'echo "${name}" > {dst}', dst)), done(rng, f"{name}={value}")],
        env={name: value},
    )


def process_pid(rng: random.Random) -> Spec:
    secs = rng.randint(600, 9000)
    dst = "/app/" + rng.choice(["pid", "proc", "sleeper"]) + ".txt"
    goal = say(
        rng,
        f"A process `sleep {secs}` is running. Write its PID into {dst}.",
        f"Find the PID of the running sleep {secs} and save it to {dst}.",
    )
    setup = [f"(setsid sleep {secs} >/dev/null 2>&1 &)"]
    check = f"[ \"$(tr -d '[:space:]' < {dst})\" = \"$(pgrep -f 'sleep {secs}' | head -n 1)\" ]"
    return Spec(
        "process_pid",
        goal,
        check,
        [bash(f"pgrep -f 'sleep {secs}' > {dst} && cat {dst}"), done(rng, f"saved the PID in {dst}")],
        setup,
    )


def kill_process(rng: random.Random) -> Spec:
    secs = rng.randint(600, 9000)
    goal = say(rng, f"Stop the running process `sleep {secs}`.", f"Kill the process sleep {secs} that is running.")
    setup = [f"(setsid sleep {secs} >/dev/null 2>&1 &)"]
    check = f"sleep 0.3; ! pgrep -f 'sleep {secs}' >/dev/null"
    return Spec(
        "kill_process", goal, check, [bash(f"pkill -f 'sleep {secs}'"), done(rng, f"stopped sleep {secs}")], setup
    )


# -- archives -----------------------------------------------------------------------------------------
def make_archive(rng: random.Random) -> Spec:
    d = rng.choice(DIRS)
    name = rng.choice(["bundle", "backup", "pack", "snapshot", d])
    files = pick(rng, WORDS, 3)
    setup = [f"mkdir -p /app/{d}"] + [f"echo {f} > /app/{d}/{f}.txt" for f in files]
    arc = f"/app/{name}.tar.gz"
    goal = say(
        rng, f"Pack the folder /app/{d} into the compressed archive {arc}.", f"Create {arc}, a tar.gz of /app/{d}."
    )
    check = f"tar -tzf {arc} | grep -q {files[0]}.txt"
    return Spec("make_archive", goal, check, [bash(f"tar -czf {arc} -C /app {d}"), done(rng, f"created {arc}")], setup)


def unpack_archive(rng: random.Random) -> Spec:
    name = rng.choice(["delivery", "bundle", "release", "payload", "kit"])
    inner = rng.choice(WORDS)
    dest = "/app/" + rng.choice(["out", "extracted", "contents", "here", "opened"])
    setup = [
        f"mkdir -p /tmp/s/{inner} && echo {inner} > /tmp/s/{inner}/readme.txt"
        f" && tar -czf /app/{name}.tar.gz -C /tmp/s {inner} && rm -rf /tmp/s"
    ]
    goal = say(
        rng,
        f"Unpack /app/{name}.tar.gz into the directory {dest}.",
        f"Extract the files of /app/{name}.tar.gz into {dest}.",
    )
    check = f"[ -f {dest}/{inner}/readme.txt ]"
    return Spec(
        "unpack_archive",
        goal,
        check,
        [bash(f"mkdir -p {dest} && tar -xzf /app/{name}.tar.gz -C {dest}"), done(rng, f"extracted into {dest}")],
        setup,
    )


# -- JSON and CSV -------------------------------------------------------------------------------------
def json_key(rng: random.Random) -> Spec:
    src = "/app/" + rng.choice(["config", "settings", "app", "service", "meta"]) + ".json"
    dst = "/app/" + fname(rng, OUTS, "txt")
    obj = {
        "name": rng.choice(WORDS),
        "version": f"{rng.randint(0, 9)}.{rng.randint(0, 20)}",
        "workers": rng.randint(1, 64),
        "owner": rng.choice(WORDS),
    }
    key = rng.choice(list(obj))
    import json

    goal = say(
        rng, f"Write the {key} value from {src} into {dst}.", f'What is the "{key}" field of {src}? Save it to {dst}.'
    )
    turns = [bash(shown(f"jq -r .{key} {src} > {dst}", dst)), done(rng, f"{key} is {obj[key]}")]
    if rng.random() < 0.4:
        turns = [bash(f"cat {src}"), [{"write": dst, "content": f"{obj[key]}\n"}], done(rng, f"{key} is {obj[key]}")]
    return Spec("json_key", goal, same_text(dst, str(obj[key])), turns, [put(src, json.dumps(obj) + "\n")])


def csv_column(rng: random.Random) -> Spec:
    src = "/app/" + rng.choice(["staff", "stock", "grades", "cities", "pets"]) + ".csv"
    dst = "/app/" + fname(rng, OUTS, "txt")
    rows = [(rng.choice(WORDS), str(rng.randint(1, 99))) for _ in range(rng.randint(3, 7))]
    header = rng.choice([("name", "qty"), ("item", "count"), ("who", "score")])
    text = ",".join(header) + "\n" + "\n".join(",".join(r) for r in rows) + "\n"
    if rng.random() < 0.5:
        goal = f"Count the data rows of {src} (not the header) and write the number into {dst}."
        return Spec(
            "csv_column",
            goal,
            same_text(dst, str(len(rows))),
            [bash(shown(f"tail -n +2 {src} | wc -l > {dst}", dst)), done(rng, f"{len(rows)} rows")],
            [put(src, text)],
        )
    goal = f"Write the {header[0]} column of {src}, without its header, into {dst}."
    check = f'[ "$(cat {dst})" = {shlex.quote(chr(10).join(r[0] for r in rows))} ]'
    return Spec(
        "csv_column",
        goal,
        check,
        [bash(shown(f"tail -n +2 {src} | cut -d, -f1 > {dst}", dst)), done(rng, f"{len(rows)} names")],
        [put(src, text)],
    )


def key_value(rng: random.Random) -> Spec:
    src = "/app/" + rng.choice(["server.conf", "app.ini", "db.cfg", "settings.env"])
    dst = "/app/" + fname(rng, OUTS, "txt")
    keys = {
        "port": str(rng.randint(1024, 65000)),
        "host": rng.choice(WORDS),
        "user": rng.choice(WORDS),
        "level": rng.choice(["debug", "info", "warn"]),
    }
    key = rng.choice(list(keys))
    text = "".join(f"{k}={v}\n" for k, v in keys.items())
    goal = say(
        rng,
        f"{src} has a line {key}=... ; write the {key} value into {dst}.",
        f"Read the {key} setting from {src} and save its value to {dst}.",
    )
    turns = [bash(f"cat {src}"), [{"write": dst, "content": keys[key] + "\n"}], done(rng, f"{key} is {keys[key]}")]
    if rng.random() < 0.5:
        turns = [bash(shown(f"grep '^{key}=' {src} | cut -d= -f2 > {dst}", dst)), done(rng, f"{key} is {keys[key]}")]
    return Spec("key_value", goal, same_text(dst, keys[key]), turns, [put(src, text)])


# -- scripts and programs -----------------------------------------------------------------------------
def shell_script(rng: random.Random) -> Spec:
    path = "/app/" + rng.choice(["say", "hello", "print", "show", "greet2"]) + ".sh"
    word = rng.choice(WORDS)
    goal = say(
        rng, f"Write a shell script {path} that prints {word}.", f"Create {path} so that `bash {path}` outputs {word}."
    )
    return Spec(
        "shell_script",
        goal,
        f'[ "$(bash {path})" = {word} ]',
        [
            [{"write": path, "content": f"#!/bin/sh\necho {word}\n"}],
            bash(f"bash {path}"),
            done(rng, f"{path} prints {word}"),
        ],
    )


def python_program(rng: random.Random) -> Spec:
    path = "/app/" + rng.choice(["calc", "compute", "prog", "main", "run"]) + ".py"
    kind = rng.choice(["sum", "square", "count", "product"])
    n = rng.randint(3, 12)
    if kind == "sum":
        goal, code, value = (
            f"Write a Python program {path} that prints the sum of 1 to {n}.",
            f"print(sum(range(1, {n + 1})))\n",
            sum(range(1, n + 1)),
        )
    elif kind == "square":
        goal, code, value = f"Write a Python script {path} that prints {n} squared.", f"print({n} ** 2)\n", n * n
    elif kind == "product":
        m = rng.randint(2, 9)
        goal, code, value = f"Create {path}, a Python program printing {n} times {m}.", f"print({n} * {m})\n", n * m
    else:
        goal, code, value = (
            f"Write {path}: a Python program that prints the numbers 1 to {n}, one per line.",
            f"for i in range(1, {n + 1}):\n    print(i)\n",
            n,
        )
    check = f"python3 {path} | tail -n 1 | grep -qx {value}"
    return Spec(
        "python_program",
        goal,
        check,
        [[{"write": path, "content": code}], bash(f"python3 {path}"), done(rng, f"{path} prints {value}")],
    )


# -- more of the everyday: folders, joining, filtering, sequences, checksums, dates -----------------------
def remove_dir(rng: random.Random) -> Spec:
    d = "/app/" + rng.choice([*DIRS, "tmp", "cache", "old", "build", "scratch"])
    keep = "/app/" + fname(rng)
    setup = [f"mkdir -p {d}/sub && echo a > {d}/one.txt && echo b > {d}/sub/two.txt", put(keep, "keep\n")]
    goal = say(
        rng,
        f"Delete the directory {d} and everything inside it.",
        f"{d} is not needed any more; remove it with all its contents.",
        f"Remove the folder {d}, including its files and subfolders.",
    )
    check = f"[ ! -e {d} ] && [ -f {keep} ]"
    if rng.random() < 0.4:  # the plain rm fails on a folder: read the error, then fix it
        turns = [bash(f"rm {d}"), bash(f"rm -r {d}"), done(rng, f"removed {d}")]
    else:
        turns = [bash(f"rm -r {d}"), done(rng, f"removed {d}")]
    return Spec("remove_dir", goal, check, turns, setup)


def concat_files(rng: random.Random) -> Spec:
    n = rng.randint(2, 3)
    names = list(dict.fromkeys("/app/" + fname(rng) for _ in range(n + 2)))[:n]
    dst = "/app/" + fname(rng, [*OUTS, "all", "combined", "merged", "full"])
    while dst in names:
        dst = "/app/merged_" + dst.rsplit("/", 1)[1]
    texts = ["\n".join(lines_of(rng, rng.randint(1, 3))) + "\n" for _ in names]
    listed = ", ".join(names[:-1]) + " and " + names[-1]
    goal = say(
        rng,
        f"Concatenate {listed} (in that order) into {dst}.",
        f"Put the contents of {listed} one after the other into {dst}.",
        f"Merge {listed} into a single file {dst}, keeping their order.",
    )
    check = f'[ "$(cat {dst})" = {shlex.quote("".join(texts).rstrip())} ]'
    return Spec(
        "concat_files",
        goal,
        check,
        [bash(f"cat {' '.join(names)} > {dst}"), done(rng, f"joined {n} files into {dst}")],
        [put(p, t) for p, t in zip(names, texts, strict=True)],
    )


def reverse_lines(rng: random.Random) -> Spec:
    src, dst = two_files(rng)
    items = lines_of(rng, rng.randint(3, 8))
    goal = say(
        rng,
        f"Write the lines of {src} in reverse order into {dst}.",
        f"Save {src} upside down (its last line first) as {dst}.",
        f"Reverse the order of the lines in {src} and write the result to {dst}.",
    )
    check = f'[ "$(cat {dst})" = {shlex.quote(chr(10).join(reversed(items)))} ]'
    return Spec(
        "reverse_lines",
        goal,
        check,
        [bash(shown(f"tac {src} > {dst}", dst)), done(rng, f"reversed {len(items)} lines into {dst}")],
        [put(src, "\n".join(items) + "\n")],
    )


def filter_lines(rng: random.Random) -> Spec:
    src, dst = two_files(rng, rng.choice(["txt", "log"]))
    key = rng.choice(["ERROR", "WARN", "INFO", "TRACE", "skip", "old", "#", "test"])
    others = [w for w in ("alpha", "beta", "gamma", "delta", "omega", "kappa") if w != key]
    lines = [f"{rng.choice([key, rng.choice(others)])} {rng.choice(WORDS)}" for _ in range(rng.randint(5, 10))]
    lines[0] = f"{key} {rng.choice(WORDS)}"
    lines[-1] = f"{rng.choice(others)} {rng.choice(WORDS)}"
    keep = rng.random() < 0.5
    if keep:
        goal = say(
            rng,
            f"Copy only the lines of {src} that contain {key} into {dst}.",
            f"Write the lines of {src} mentioning {key} to {dst}.",
        )
        expected = [ln for ln in lines if key in ln]
        cmd = f"grep '{key}' {src} > {dst}"
    else:
        goal = say(
            rng,
            f"Write all lines of {src} except those containing {key} into {dst}.",
            f"Leave out every line with {key} in it: save the rest of {src} as {dst}.",
            f"Filter {src}: keep the lines without {key}, in {dst}.",
        )
        expected = [ln for ln in lines if key not in ln]
        cmd = f"grep -v '{key}' {src} > {dst}"
    check = f'[ "$(cat {dst})" = {shlex.quote(chr(10).join(expected))} ]'
    return Spec(
        "filter_lines",
        goal,
        check,
        [bash(shown(cmd, dst)), done(rng, f"{len(expected)} lines in {dst}")],
        [put(src, "\n".join(lines) + "\n")],
    )


def drop_blank(rng: random.Random) -> Spec:
    src = "/app/" + fname(rng)
    items = lines_of(rng, rng.randint(3, 6))
    text = "\n\n".join(items) + "\n\n"
    goal = say(
        rng,
        f"Delete the empty lines from {src}; keep the rest as it is.",
        f"{src} has blank lines in it. Take them out, leaving the other lines in order.",
    )
    check = f'[ "$(cat {src})" = {shlex.quote(chr(10).join(items))} ]'
    return Spec(
        "drop_blank",
        goal,
        check,
        [bash(f"sed -i '/^$/d' {src} && cat {src}"), done(rng, f"{len(items)} lines left")],
        [put(src, text)],
    )


def number_seq(rng: random.Random) -> Spec:
    a = rng.choice([0, 1, 1, 1, 5, 10])
    b = a + rng.randint(3, 40)
    dst = "/app/" + fname(rng, OUTS + STEMS)
    goal = say(
        rng,
        f"Fill {dst} with the whole numbers from {a} to {b}, one per line.",
        f"Write the numbers {a} to {b} into {dst}, each on a line of its own.",
        f"Create {dst} listing every number from {a} up to {b}, one a line.",
    )
    check = f'[ "$(cat {dst})" = "$(seq {a} {b})" ]'
    return Spec("number_seq", goal, check, [bash(f"seq {a} {b} > {dst}"), done(rng, f"wrote {a}..{b} into {dst}")])


def checksum(rng: random.Random) -> Spec:
    src = "/app/" + rng.choice(STEMS) + rng.choice([".bin", ".dat", ".iso", ".txt"])
    dst = "/app/" + rng.choice(["sum", "hash", "digest", "check"]) + rng.choice([".txt", ""])
    tool, label = rng.choice([("md5sum", "MD5"), ("sha256sum", "SHA-256"), ("sha1sum", "SHA-1")])
    goal = say(
        rng,
        f"Write the {label} hash of {src} (only the hex string) into {dst}.",
        f"Compute the {label} checksum of {src} and save just the digest in {dst}.",
    )
    check = f'[ "$(tr -d "[:space:]" < {dst})" = "$({tool} {src} | cut -d" " -f1)" ]'
    return Spec(
        "checksum",
        goal,
        check,
        [bash(shown(f"{tool} {src} | cut -d' ' -f1 > {dst}", dst)), done(rng, f"saved the {label} digest in {dst}")],
        [f"head -c {rng.randint(100, 9000)} /dev/urandom > {src}"],
    )


def date_part(rng: random.Random) -> Spec:
    fmt, what = rng.choice(
        [
            ("%Y", "the current year"),
            ("%m", "the current month as two digits"),
            ("%F", "today's date as YYYY-MM-DD"),
            ("%A", "the name of today's weekday"),
            ("%d", "the day of the month, two digits"),
        ]
    )
    dst = "/app/" + rng.choice(["date", "today", "now", "when", "stamp"]) + rng.choice([".txt", ""])
    goal = say(rng, f"Write {what} into {dst}.", f"Save {what} in the file {dst}.")
    check = f'[ "$(cat {dst})" = "$(date +{fmt})" ]'
    return Spec("date_part", goal, check, [bash(shown(f"date +{fmt} > {dst}", dst)), done(rng, f"saved {what}")])


def line_number(rng: random.Random) -> Spec:
    src, dst = two_files(rng)
    items = pick(rng, WORDS, rng.randint(4, 12))
    k = rng.randint(1, len(items))
    word = items[k - 1]
    goal = say(
        rng,
        f"Which line of {src} is {word}? Write its line number into {dst}.",
        f"Find the number of the line where {word} appears in {src} and save it to {dst}.",
    )
    return Spec(
        "line_number",
        goal,
        same_text(dst, str(k)),
        [bash(shown(f"grep -n '^{word}$' {src} | cut -d: -f1 > {dst}", dst)), done(rng, f"line {k}")],
        [put(src, "\n".join(items) + "\n")],
    )


def list_archive(rng: random.Random) -> Spec:
    name = rng.choice(["delivery", "bundle", "shipment", "payload", "box", "crate"])
    gz = rng.random() < 0.5
    arc = f"/app/{name}.tar" + (".gz" if gz else "")
    files = sorted(pick(rng, WORDS, rng.randint(2, 4)))
    dst = "/app/" + fname(rng, [*OUTS, "contents", "names", "index"], "txt")
    setup = [
        "mkdir -p /tmp/s && cd /tmp/s && "
        + " && ".join(f"echo {f} > {f}.txt" for f in files)
        + f" && tar -c{'z' if gz else ''}f {arc} "
        + " ".join(f"{f}.txt" for f in files)
        + " && cd / && rm -rf /tmp/s"
    ]
    goal = say(
        rng,
        f"List the files stored in the archive {arc} into {dst}, one name a line.",
        f"What does {arc} contain? Save the names of its files to {dst}.",
    )
    check = f'[ "$(sort {dst})" = {shlex.quote(chr(10).join(f + ".txt" for f in files))} ]'
    return Spec(
        "list_archive",
        goal,
        check,
        [bash(shown(f"tar -t{'z' if gz else ''}f {arc} > {dst}", dst)), done(rng, f"{len(files)} files")],
        setup,
    )


def count_hidden(rng: random.Random) -> Spec:
    d = "/app/" + rng.choice(DIRS)
    dst = "/app/" + fname(rng, OUTS, "txt")
    hidden = list(dict.fromkeys("." + rng.choice(WORDS) for _ in range(rng.randint(1, 5))))
    shown_names = list(dict.fromkeys(rng.choice(WORDS) + ".txt" for _ in range(rng.randint(1, 4))))
    setup = [f"mkdir -p {d} && cd {d} && touch " + " ".join(hidden + shown_names) + " && cd /app"]
    goal = say(
        rng,
        f"How many hidden files (names beginning with a dot) are in {d}? Write the number into {dst}.",
        f"Count the dot-files in {d} and save the count in {dst}.",
    )
    return Spec(
        "count_hidden",
        goal,
        same_text(dst, str(len(hidden))),
        [bash(shown(f"ls -A {d} | grep -c '^\\.' > {dst}", dst)), done(rng, f"{len(hidden)} hidden files")],
        setup,
    )


def lower_case(rng: random.Random) -> Spec:
    return change_case(rng, upper=False)


def copy_dir(rng: random.Random) -> Spec:
    src = "/app/" + rng.choice(DIRS)
    dst = src + rng.choice(["_copy", "_backup", "2", ".bak", "_old"])
    files = pick(rng, WORDS, rng.randint(1, 3))
    setup = [f"mkdir -p {src}/inner && " + " && ".join(f"echo {f} > {src}/inner/{f}.txt" for f in files)]
    goal = say(
        rng,
        f"Copy the whole folder {src} to {dst}.",
        f"Make {dst} a copy of the directory {src}, with everything in it.",
    )
    check = f"diff -r {src} {dst} >/dev/null && [ -f {dst}/inner/{files[0]}.txt ]"
    return Spec("copy_dir", goal, check, [bash(f"cp -r {src} {dst}"), done(rng, f"copied {src} to {dst}")], setup)


def find_ext(rng: random.Random) -> Spec:
    d = "/app/" + rng.choice(DIRS)
    ext = rng.choice(["log", "csv", "md", "py", "conf", "json"])
    dst = "/app/" + fname(rng, OUTS, "txt")
    hits = [
        f"{d}/{rng.choice(['a', 'b', 'c'])}{i}/{w}.{ext}" for i, w in enumerate(pick(rng, WORDS, rng.randint(1, 4)))
    ]
    misses = [f"{d}/{w}.txt" for w in pick(rng, WORDS, 2)]
    setup = [f"mkdir -p {p.rsplit('/', 1)[0]} && touch {p}" for p in hits + misses]
    goal = say(
        rng,
        f"Find every .{ext} file anywhere under {d} and write their paths into {dst}.",
        f"List the paths of all .{ext} files below {d} (subfolders too) in {dst}.",
    )
    check = f'[ "$(sort {dst})" = {shlex.quote(chr(10).join(sorted(hits)))} ]'
    return Spec(
        "find_ext",
        goal,
        check,
        [bash(shown(f"find {d} -name '*.{ext}' > {dst}", dst)), done(rng, f"{len(hits)} .{ext} files")],
        setup,
    )


def cut_field(rng: random.Random) -> Spec:
    src, dst = two_files(rng)
    sep, sep_name = rng.choice([(":", "colon"), (",", "comma"), (";", "semicolon")])
    k = rng.randint(1, 3)
    rows = [[rng.choice(WORDS), str(rng.randint(1, 99)), rng.choice(WORDS)] for _ in range(rng.randint(3, 6))]
    nth = ["first", "second", "third"][k - 1]
    goal = say(
        rng,
        f"Each line of {src} has fields separated by a {sep_name}. Write the {nth} field of every line into {dst}.",
        f"Save column {k} of {src} ({sep_name}-separated) to {dst}, one value a line.",
    )
    check = f'[ "$(cat {dst})" = {shlex.quote(chr(10).join(r[k - 1] for r in rows))} ]'
    return Spec(
        "cut_field",
        goal,
        check,
        [bash(shown(f"cut -d'{sep}' -f{k} {src} > {dst}", dst)), done(rng, f"column {k} saved in {dst}")],
        [put(src, "\n".join(sep.join(r) for r in rows) + "\n")],
    )


def move_into_dir(rng: random.Random) -> Spec:
    src = "/app/" + fname(rng)
    d = "/app/" + rng.choice(DIRS)
    name = src.rsplit("/", 1)[1]
    setup = [put(src, rng.choice(WORDS) + "\n")] + ([f"mkdir -p {d}"] if rng.random() < 0.6 else [])
    goal = say(
        rng,
        f"Move {src} into the folder {d}.",
        f"Put the file {src} inside {d} (it should no longer be in /app).",
    )
    check = f"[ -f {d}/{name} ] && [ ! -e {src} ]"
    return Spec(
        "move_into_dir", goal, check, [bash(f"mkdir -p {d} && mv {src} {d}/"), done(rng, f"moved to {d}/{name}")], setup
    )


def write_note(rng: random.Random) -> Spec:
    words = pick(rng, WORDS, rng.randint(2, 5))
    text = rng.choice(["remember the ", "call about ", "check the ", "buy ", "send ", "fix the "]) + " ".join(words)
    path = (
        "/app/"
        + rng.choice(["note", "notes", "reminder", "memo", "message", "readme"])
        + rng.choice([".txt", ".md", ""])
    )
    goal = say(
        rng,
        f"Write a note in {path} saying: {text}",
        f"Save the sentence '{text}' into {path}.",
        f"I need {path} to contain this text: {text}",
    )
    check = f"grep -qF {shlex.quote(text)} {path}"
    return Spec(
        "write_note", goal, check, [[{"write": path, "content": text + "\n"}], done(rng, f"wrote the note in {path}")]
    )


# -- errors to recover from -----------------------------------------------------------------------------
def missing_folder(rng: random.Random) -> Spec:
    src = "/app/" + fname(rng)
    d = "/app/" + rng.choice(DIRS) + "/" + rng.choice(["new", "2024", "today", "sub"])
    goal = say(rng, f"Copy {src} into the folder {d}.", f"Put a copy of {src} in {d}/.")
    base = src.rsplit("/", 1)[1]
    return Spec(
        "missing_folder",
        goal,
        f"cmp -s {src} {d}/{base}",
        [bash(f"cp {src} {d}/"), bash(f"mkdir -p {d} && cp {src} {d}/"), done(rng, f"copied into {d}")],
        [put(src, rng.choice(WORDS) + "\n")],
    )


def fix_typo_script(rng: random.Random) -> Spec:
    path = "/app/" + rng.choice(["run", "make", "job", "tool"]) + ".sh"
    word = rng.choice(WORDS)
    typo, good = rng.choice([("ecko", "echo"), ("ehco", "echo"), ("pritnf", "printf"), ("ech", "echo")])
    goal = say(
        rng,
        f"{path} is broken. Fix it so that `bash {path}` prints {word}.",
        f"Running bash {path} fails; repair it so it prints {word}.",
    )
    setup = [put(path, f"{typo} {word}\n")]
    fix = f"sed -i 's/{typo}/{good}/' {path} && bash {path}" if good == "echo" else None
    turns = [bash(f"bash {path}")]
    turns.append(bash(fix) if fix else [{"write": path, "content": f"echo {word}\n"}, {"bash": f"bash {path}"}])
    turns.append(done(rng, f"fixed: it prints {word}"))
    return Spec("fix_typo_script", goal, f'[ "$(bash {path} 2>/dev/null)" = {word} ]', turns, setup)


def fix_python(rng: random.Random) -> Spec:
    path = "/app/" + rng.choice(["tool", "job", "stats", "script"]) + ".py"
    var = rng.choice(["count", "value", "result", "acc"])
    bad = var[:-1] if len(var) > 3 else var + "x"
    n = rng.randint(3, 9)
    code = f"{var} = 0\nfor i in range({n}):\n    {var} += i\nprint({bad})\n"
    value = sum(range(n))
    goal = say(
        rng,
        f"{path} should print {value} but crashes. Fix it.",
        f"Make {path} run without error; it must print {value}.",
    )
    turns = [
        bash(f"python3 {path}"),
        bash(f"sed -i 's/print({bad})/print({var})/' {path} && python3 {path}"),
        done(rng, f"fixed: prints {value}"),
    ]
    return Spec("fix_python", goal, f"python3 {path} | grep -qx {value}", turns, [put(path, code)])


def wrong_path(rng: random.Random) -> Spec:
    name = fname(rng)
    d = "/app/" + rng.choice(DIRS)
    dst = "/app/" + fname(rng, OUTS, "txt")
    n = rng.randint(2, 30)
    goal = say(
        rng,
        f"Somewhere under /app there is a file named {name}. Write its number of lines into {dst}.",
        f"Count the lines of the file {name} (it is somewhere in /app) and save the number to {dst}.",
    )
    turns = [bash(f"find /app -name {name}"), bash(shown(f"wc -l < {d}/{name} > {dst}", dst)), done(rng, f"{n} lines")]
    return Spec(
        "wrong_path", goal, same_text(dst, str(n)), turns, [put(f"{d}/{name}", "\n".join(lines_of(rng, n)) + "\n")]
    )


FAMILIES: dict[str, Callable[[random.Random], Spec]] = {
    f.__name__: f
    for f in (
        write_word,
        write_lines,
        copy_file,
        move_file,
        delete_file,
        touch_file,
        make_dirs,
        append_line,
        replace_word,
        symlink,
        chmod_file,
        count_lines,
        count_words,
        count_matching,
        count_in_dir,
        sort_file,
        head_tail,
        nth_line,
        sum_numbers,
        min_max,
        file_size,
        find_word,
        biggest_file,
        upper_case,
        unique_lines,
        command_output,
        env_var,
        process_pid,
        kill_process,
        make_archive,
        unpack_archive,
        json_key,
        csv_column,
        key_value,
        shell_script,
        python_program,
        missing_folder,
        fix_typo_script,
        fix_python,
        wrong_path,
    )
}
# More everyday skills, beyond what the shipped adapter was trained on: `collect --more` adds them,
# to measure whether breadth carries to goals of skills never taught (docs/benchmarks.md).
MORE: dict[str, Callable[[random.Random], Spec]] = {
    f.__name__: f
    for f in (
        remove_dir,
        concat_files,
        reverse_lines,
        filter_lines,
        drop_blank,
        number_seq,
        checksum,
        date_part,
        line_number,
        list_archive,
        count_hidden,
        lower_case,
        copy_dir,
        find_ext,
        cut_field,
        move_into_dir,
        write_note,
    )
}


def generate(seed: int, n: int, more: bool = False) -> list[Spec]:
    """`n` tasks, families in turn, each drawn from its own seeded generator; duplicates of a goal are skipped."""
    rng = random.Random(seed)
    families = {**FAMILIES, **MORE} if more else FAMILIES
    names = sorted(families)
    out: list[Spec] = []
    seen: set[str] = set()
    tries = 0
    while len(out) < n and tries < n * 20:
        tries += 1
        family = names[len(out) % len(names)] if rng.random() < 0.7 else rng.choice(names)
        spec = families[family](random.Random(rng.getrandbits(64)))
        if spec.goal in seen:
            continue
        seen.add(spec.goal)
        out.append(spec)
    return out
