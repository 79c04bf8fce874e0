"""The layout holds: no import cycles, Textual only in the TUI, replay without llama.cpp, a real install."""

from __future__ import annotations

import ast
import itertools
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = {"sandshell": REPO / "src" / "sandshell", "sandshell_agent": REPO / "src" / "sandshell_agent"}


def _modules() -> dict[str, Path]:
    out = {}
    for top, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join([top, *parts])] = path
    return out


def _imports(name: str, path: Path, top_level_only: bool) -> set[str]:
    """Modules `name` imports (its own package's modules only), at module level or anywhere; an
    import under `if TYPE_CHECKING:` never runs, so it is no edge."""
    tree = ast.parse(path.read_text())
    checking_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for stmt in block.body
        for n in ast.walk(stmt)
    }
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in nodes:
        if id(node) in checking_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return found


def _cycles(top_level_only: bool) -> list[list[str]]:
    modules = _modules()
    graph = {m: {i for i in _imports(m, p, top_level_only) if i in modules and i != m} for m, p in modules.items()}
    cycles = []

    def visit(node: str, stack: list[str], done: set[str]) -> None:
        for nxt in graph[node]:
            if nxt in stack:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in done:
                visit(nxt, [*stack, nxt], done)
        done.add(node)

    done: set[str] = set()
    for m in graph:
        if m not in done:
            visit(m, [m], done)
    return cycles


@pytest.mark.parametrize("top_level_only", [True, False], ids=["module-level", "any-level"])
def test_no_import_cycles(top_level_only: bool) -> None:
    """Not at module level, and not through an import deferred into a function either (a package's
    `__init__` re-exporting its modules is the package, not a cycle)."""
    cycles = [c for c in _cycles(top_level_only) if not _through_an_init(c)]
    assert not cycles, f"import cycles: {cycles[:5]}"


def _through_an_init(cycle: list[str]) -> bool:
    packages = {m for m, p in _modules().items() if p.name == "__init__.py"}
    return any(m in packages and n.startswith(m + ".") for m, n in itertools.pairwise(cycle))


def test_only_the_tui_imports_textual() -> None:
    offenders = [
        m
        for m, p in _modules().items()
        if not m.startswith("sandshell.tui")
        and any(i.split(".")[0] in ("textual", "rich") for i in _imports(m, p, False))
    ]
    assert not offenders, f"the core imports Textual: {offenders}"


def test_the_agent_imports_nothing_of_the_host() -> None:
    offenders = [
        m
        for m, p in _modules().items()
        if m.startswith("sandshell_agent")
        and any(i.startswith("sandshell.") or i == "sandshell" for i in _imports(m, p, False))
    ]
    assert not offenders


def test_replaying_a_recording_needs_neither_llama_cpp_nor_numpy_nor_docker() -> None:
    recording = REPO / "tests" / "tui" / "data" / "recording"
    code = (
        "import sys; from pathlib import Path\n"
        "from sandshell.session import replay, recorder, transcript, events\n"
        f"items = list(replay.load(Path({str(recording)!r})))\n"
        "assert items, 'no events'\n"
        "text = ''.join(transcript.render(e) for _, e in items)\n"
        "heavy = [m for m in ('llama_cpp', 'numpy', 'docker', 'textual') if m in sys.modules]\n"
        "print(len(items), heavy)\n"
        "sys.exit(1 if heavy else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.docker  # (prepare checks the engine and builds the image)
def test_a_wheel_installs_into_a_fresh_venv_and_works_from_elsewhere(tmp_path: Path) -> None:
    """`pip install .` (not editable): `sandshell --help` and `sandshell prepare` run from another folder."""
    # Build from a copy of the source: building in place would write build/ into the checkout.
    source = tmp_path / "source"
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(wheels), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(wheels.glob("sandshell-*.whl"))
    env_dir = tmp_path / "venv"
    # The fresh venv sees the test venv's packages (llama.cpp, docker...) but not the checkout.
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    site = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = [p for p in sys.path if p.endswith("site-packages")]
    Path(site, "deps.pth").write_text("\n".join(deps) + "\n")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "SANDSHELL_", "PYTHON"))}
    env["SANDSHELL_HOME"] = str(elsewhere)
    probe = subprocess.run(
        [
            str(env_dir / "bin" / "python"),
            "-c",
            "import sandshell, sandshell.resources as r; print(sandshell.__file__); print(r.container_dir());"
            "print(r.agent_dir())",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    assert str(REPO) not in probe.stdout, f"the installed package reads the checkout: {probe.stdout}"
    cli = env_dir / "bin" / "sandshell"
    helped = subprocess.run([str(cli), "--help"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "replay" in helped.stdout, helped.stderr
    prepared = subprocess.run(
        [str(cli), "prepare"], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=600
    )
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    assert (elsewhere / "workspace").is_dir(), "the workspace is made under SANDSHELL_HOME"
    said = subprocess.run(
        [
            str(env_dir / "bin" / "python"),
            "-c",
            "from sandshell.resources import command as c;"
            " print(c('replay x')); print(c('reset --yes')); print(c('prepare'))",
        ],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert said.stdout.split("\n")[:3] == ["sandshell replay x", "sandshell reset --yes", "sandshell prepare"]


def test_messages_name_the_commands_of_where_sandshell_runs() -> None:
    """From a checkout `./start.sh` and `./reset.sh`; no message spells either itself (an installed
    package has neither): they all come from `resources.command`."""
    from sandshell.resources import command

    assert command("replay x") == "./start.sh replay x" and command("reset") == "./reset.sh"
    spelled = [
        f"{m}: {line.strip()}"
        for m, p in _modules().items()
        for line in p.read_text().splitlines()
        if re.search(r"""f?["'][^"']*\./(start|reset)\.sh""", line) and m != "sandshell.resources"
    ]
    assert not spelled, spelled
