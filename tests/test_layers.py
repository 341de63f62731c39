"""The package's shape, read from its source with ``ast``: layers, no import cycles (imports
inside functions included), runners that import no other runner, files of one screen of
concepts.

Layers, lowest first (a module may import its own layer and the layers below it only), as drawn
in the house plan (ARCHITECTURE.md) and as the imports are:

1. base: ``certdp`` (DTYPE), ``errors``, ``kernels`` (elementary functions settled and checked), ``losses``, ``models``, ``seeding``, ``metrics``,
   ``results`` (atomic files and run folders; imports nothing of certdp), ``registry`` (named
   tables), ``checkpoint`` (resumable loops) and ``data`` (datasets, their registry and the typed
   settings parsers ``data.params``)
2. ``bounds`` (certificate engines and their registry)
3. ``training``, ``agt`` (the nominal algorithm and its envelopes)
4. ``privacy`` (staircases, mechanisms, accountants, DP-SGD noise)
5. ``settings`` (the one settings entrance)
6. ``certify``, ``baselines`` (the certification layer and the private-learning baselines),
   ``estimate`` (a run's cost from its settings) and ``commands`` (one registry entry per command:
   its settings parser, its cost model, its runner named as ``"module:function"`` and imported
   only when it runs, so that no entry imports a runner)
7. ``methods`` (one runner per command; leaves)
8. interface: ``signals``, ``runs``, ``job`` (a command line and its jobs), ``resuming``, ``figure_times``, ``cli``,
   ``listing``, ``figures``, ``plots``, ``reproduction``

Inside the base layer, the leaves stay leaves (:data:`BASE_LEAVES`): ``errors``, ``seeding``,
``results`` and ``registry`` import nothing of certdp, and ``data`` imports only ``errors``,
``registry`` (its dataset table), ``results`` (the atomic writer of its caches) and ``checkpoint``
(a sentence encoder's embedding is one of the run's loops: progress records, held signals) -- a
loader never depends on a model, an engine or a release.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_tree import _cycle

ROOT = Path(__file__).resolve().parent.parent / "certdp"

LAYERS = [
    ("base", ("certdp", "certdp.errors", "certdp.kernels", "certdp.losses", "certdp.models", "certdp.seeding", "certdp.metrics",
              "certdp.results", "certdp.registry", "certdp.checkpoint", "certdp.data")),
    ("bounds", ("certdp.bounds",)),
    ("training", ("certdp.training", "certdp.agt", "certdp.neighbours")),
    ("privacy", ("certdp.privacy",)),
    ("settings", ("certdp.settings",)),
    ("certify", ("certdp.certify", "certdp.baselines", "certdp.estimate", "certdp.commands")),
    ("methods", ("certdp.methods",)),
    ("interface", ("certdp.signals", "certdp.runs", "certdp.job", "certdp.resuming", "certdp.figure_times", "certdp.cli",
                   "certdp.listing", "certdp.figures", "certdp.plots", "certdp.reproduction")),
]
# base-layer packages -> the certdp packages (outside themselves) they may import
BASE_LEAVES = {"certdp.errors": (), "certdp.kernels": ("certdp.errors",), "certdp.seeding": (), "certdp.results": (), "certdp.registry": (),
               "certdp.data": ("certdp.errors", "certdp.registry", "certdp.results", "certdp.checkpoint")}
MAX_LINES = 500


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def layer_of(mod: str) -> int:
    """Index of the layer holding ``mod`` (the longest matching prefix)."""
    best, depth = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for pre in prefixes:
            if (mod == pre or mod.startswith(pre + ".")) and pre.count(".") > depth:
                best, depth = i, pre.count(".")
    assert best is not None, f"{mod} belongs to no layer: add it to LAYERS"
    return best


def resolve(mod: str, node: ast.AST) -> list[str]:
    """The certdp modules an import statement names (``from pkg import sub`` names the
    submodule when there is one, else the package)."""
    is_pkg = MODULES[mod].name == "__init__.py"
    out = []
    if isinstance(node, ast.Import):
        out = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = mod.split(".") if is_pkg else mod.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        for a in node.names:
            sub = f"{target}.{a.name}"
            out.append(sub if sub in MODULES else target)
    return [m for m in out if m == "certdp" or m.startswith("certdp.")]


def imports() -> dict[str, set[str]]:
    graph = {}
    for mod, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        deps = set()
        for node in ast.walk(tree):                  # every import, inside functions too
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps.update(d for d in resolve(mod, node) if d in MODULES and d != mod)
        graph[mod] = deps
    return graph


GRAPH = imports()


def test_every_module_has_a_layer():
    for mod in MODULES:
        layer_of(mod)


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_imports_go_down_the_layers(mod):
    up = sorted(d for d in GRAPH[mod] if layer_of(d) > layer_of(mod))
    assert not up, f"{mod} ({LAYERS[layer_of(mod)][0]}) imports from higher layers: " + ", ".join(
        f"{d} ({LAYERS[layer_of(d)][0]})" for d in up)


def _inside(mod: str, pkg: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


@pytest.mark.parametrize("leaf", sorted(BASE_LEAVES))
def test_base_leaves_stay_leaves(leaf):
    allowed = BASE_LEAVES[leaf]
    bad = sorted({d for m, deps in GRAPH.items() if _inside(m, leaf) for d in deps
                  if not _inside(d, leaf) and not any(_inside(d, a) for a in allowed)})
    assert not bad, f"{leaf} may import only {allowed or 'nothing of certdp'}; it imports {', '.join(bad)}"


def test_the_layer_guard_catches_an_upward_import():
    """A planted import of ``certdp.bounds`` from ``certdp.data`` is caught by both checks."""
    planted = ast.parse("from certdp.bounds import get_certificate").body[0]
    deps = set(resolve("certdp.data", planted))
    assert any(layer_of(d) > layer_of("certdp.data") for d in deps)
    assert not all(any(_inside(d, a) for a in BASE_LEAVES["certdp.data"]) for d in deps)


def test_no_import_cycles():
    # a package's __init__ that imports its own submodules (a registry) is not an edge back
    edges = {m: {d for d in deps if not (MODULES[d].name == "__init__.py" and m.startswith(d + "."))}
             for m, deps in GRAPH.items()}
    found = _cycle(edges)                            # the whole tree's search (tests/test_tree.py)
    assert found is None, "import cycle: " + " -> ".join(found or [])


def runner_of(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["certdp", "methods"] else None


def test_runners_are_leaves():
    for mod, deps in GRAPH.items():
        me = runner_of(mod)
        for d in deps:
            other = runner_of(d)
            assert other is None or other == me, f"runner {mod} imports runner {d}"
        if mod.startswith("certdp.methods"):
            continue
        assert not any(d.startswith("certdp.methods") for d in deps), f"{mod} imports a runner"


@pytest.mark.parametrize("mod", sorted(MODULES))
def test_no_file_over_one_screen_of_concepts(mod):
    n = len(MODULES[mod].read_text().splitlines())
    assert n <= MAX_LINES, f"{MODULES[mod]} has {n} lines (limit {MAX_LINES})"
