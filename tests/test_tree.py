"""The whole tree's imports, read with ``ast``: the package, its tools, the benchmarks and the
tests together have no import cycle (imports inside functions included), and no arrow goes back
up the tree's layers -- the package imports none of the others, the tools no benchmark or test,
the benchmarks no test helper.  (``test_layers.py`` orders the package's own layers.)"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ["certdp", "tools", "benchmarks", "experiments", "tests"]          # lowest first
RANK = {p: i for i, p in enumerate(PARTS)}


def _names(path: Path) -> list[str]:
    """Every name the file is imported under: its dotted path from the root, and its bare name
    for the script folders whose files import one another as top-level modules."""
    rel = path.relative_to(ROOT).with_suffix("")
    dotted = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
    return [dotted, rel.name] if rel.parts[0] in ("tests", "benchmarks") and len(rel.parts) == 2 else [dotted]


def _graph(paths: list[Path]) -> dict[str, set[str]]:
    owner = {n: _names(p)[0] for p in paths for n in _names(p)}
    graph: dict[str, set[str]] = {}
    for p in paths:
        me = _names(p)[0]
        package = me if p.name == "__init__.py" else me.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            else:
                continue
            for t in targets:
                while t and t not in owner:
                    t = t.rpartition(".")[0]
                if t and owner[t] != me:
                    deps.add(owner[t])
        graph[me] = deps
    return graph


def _tree() -> dict[str, set[str]]:
    paths = [p for part in PARTS for p in sorted((ROOT / part).rglob("*.py")) if "__pycache__" not in p.parts]
    graph = _graph(paths)
    # a package's __init__ that imports its own submodules (a registry) is not an edge back
    return {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def _arrows_up(graph: dict[str, set[str]]) -> list[str]:
    return [f"{m} -> {d}" for m, deps in graph.items() for d in deps
            if RANK[d.split(".")[0]] > RANK[m.split(".")[0]]]


def test_the_whole_tree_has_no_import_cycle():
    graph = _tree()
    assert len(graph) > 200 and any(m.startswith("tools.prober") for m in graph)
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_no_arrow_goes_back_up_the_tree():
    assert _arrows_up(_tree()) == []


def test_the_checks_catch_a_planted_cycle_and_an_upward_arrow():
    graph = _tree()
    victim = "tools.prober"
    planted = {**graph, "certdp.results": graph["certdp.results"] | {victim}}
    assert _arrows_up(planted) == [f"certdp.results -> {victim}"]
    deps = graph[victim] | {"certdp.results"}
    assert _cycle({**planted, victim: deps}) is not None
    # a relative import is resolved like the interpreter does
    g = _graph([ROOT / "tools" / "prober" / "__init__.py"])
    assert all(d.startswith(("tools.prober", "certdp")) for d in g["tools.prober"])


def _long_files(limit: int = 500) -> list[str]:
    return [f"{p.relative_to(ROOT)}: {n} lines" for part in PARTS for p in sorted((ROOT / part).rglob("*.py"))
            if "__pycache__" not in p.parts and (n := len(p.read_text().splitlines())) > limit]


def test_every_python_file_of_the_tree_fits_500_lines():
    assert _long_files() == []
    assert _long_files(limit=400) != []          # the check sees the files (a lower limit finds some)
