"""The machinery stays easy to change: no import cycle in common/ (imports inside functions
included), no script or helper that changes ``args`` after argparse has returned it, and the
mutation benchmark's lines still in the scripts. Line counts are figures for tests/README.md,
not tests."""

import ast
import re
import sys
from pathlib import Path

from conftest import ROOT

COMMON = ROOT / "common"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``path`` imports anywhere in it, functions included.
    ``from common.extras import x`` counts as importing ``common.extras`` itself, unless x is
    a module of its own."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [name if name in modules else node.module for name in names]
        else:
            continue
        found |= {name for name in names if name in modules}
    return found


def import_graph() -> dict[str, set[str]]:
    files = {module_name(path): path for path in COMMON.rglob("*.py")}
    return {name: imports_of(path, set(files)) - {name} for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return [*stack[stack.index(target):], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_cycle_in_common():
    assert find_cycle(import_graph()) is None, " -> ".join(find_cycle(import_graph()))


def test_the_cycle_finder_finds_one_inside_a_function(tmp_path):
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from common.extras.cli import run\n")
    assert imports_of(probe, {"common.extras.cli"}) == {"common.extras.cli"}


def test_nothing_assigns_to_args_after_parsing():
    """argparse types and actions convert values as they parse; nothing changes them later."""
    offenders = []
    for path in [*ROOT.glob("a0*.py"), *COMMON.rglob("*.py")]:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if re.search(r"\bargs\.\w+\s*=[^=]", line) or "setattr(args" in line:
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert offenders == []


def test_every_mutation_finds_its_line_once():
    """tests/benchmarks/mutate_tutorial_lines.py replaces whole lines of the scripts: a line
    reworded there (a comment added) must be reworded in its list too, or its full run stops
    at that line after many minutes (as it did once, on a08's batch-to-device line)."""
    sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))
    import mutate_tutorial_lines as benchmark

    for mutation in benchmark.MUTATIONS:
        benchmark.apply(mutation, (ROOT / mutation.path).read_text())  # exits if not one line
