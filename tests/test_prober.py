"""The hostile-input prober (``tools/prober``): a package without import cycles whose layers only
import down, a catalogue whose probes are well formed, a judge that flags what the issues count
as failures, and (slow) passes of a fast subset and of ``--quick`` that come out green."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import tools.prober as prober
from tools.prober.catalogue import build
from tools.prober.fixtures import NEEDS
from tools.prober.judge import judge
from tools.prober.model import BEHAVIOURS, FAILURE_KIND, OK, Probe
from tools.prober.specials import SPECIALS

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tools" / "prober"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The tools.prober modules a file imports (anywhere in it), relative to the package."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for n in names:
            if n.startswith("tools.prober."):
                out.add(n[len("tools.prober."):])
    mods = {_module(p) for p in PACKAGE.rglob("*.py")}
    return {n for n in out if n in mods or n.rsplit(".", 1)[0] in mods}


def _layer(mod: str) -> int:
    return prober.LAYERS.index(mod.split(".")[0])


def test_the_prober_imports_only_down_its_layers_and_has_no_cycle():
    files = {_module(p): p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE}
    graph = {}
    for mod, path in files.items():
        deps = {d if d in files else d.rsplit(".", 1)[0] for d in _imports(path)} - {mod}
        graph[mod] = deps
        for d in deps:
            top_m, top_d = mod.split(".")[0], d.split(".")[0]
            assert _layer(d) <= _layer(mod), f"tools.prober.{mod} imports tools.prober.{d}, a layer above it"
            assert top_m == top_d or _layer(d) < _layer(mod), (mod, d)
    seen, done = set(), set()

    def visit(m, path):
        assert m not in seen or m in done, f"import cycle: {' -> '.join(path + [m])}"
        if m in done:
            return
        seen.add(m)
        for d in graph.get(m, ()):
            visit(d, path + [m])
        done.add(m)
    for m in graph:
        visit(m, [])
    assert "sys.modules" not in "".join(p.read_text() for p in (ROOT / "tools").rglob("*.py"))


def test_every_file_of_tools_and_its_tests_is_at_most_500_lines():
    for p in [*(ROOT / "tools").rglob("*.py"), Path(__file__)]:
        assert len(p.read_text().splitlines()) <= 500, p


def test_the_catalogue_is_well_formed():
    probes = build()
    ids = [p.id for p in probes]
    assert len(ids) == len(set(ids)) and len(probes) > 800
    for p in probes:
        assert p.expect in ("refuse", "run", "either", "usage", "info", "special"), p.id
        assert not p.special or p.special in SPECIALS, p.id
        assert p.extra.get("needs") in NEEDS | {None} and p.extra.get("fixture") in NEEDS | {None}, p.id
        if p.extra.get("hardening"):
            assert p.extra.get("correct"), f"{p.id} does not state what outcome is correct"
            assert 1 <= p.extra.get("item", 0) <= 16, p.id
    items = {p.extra["item"] for p in probes if p.extra.get("hardening")}
    assert items == set(range(1, 17)), f"issue 28's items without a probe: {set(range(1, 17)) - items}"
    assert set(FAILURE_KIND) == set(BEHAVIOURS) - set(OK)


def test_the_prober_flags_what_the_issue_counts_as_failures(tmp_path):
    """The prober's judge on planted outcomes: a refusal without its allowed part, a refusal
    naming another key, a multi-line usage error, a traceback, outputs/ left in the cwd."""
    p = Probe("x", ["agtr", "train.lr=abc"], "refuse", ("train.lr",))

    def behaviour(se, rc=2, out=tmp_path):
        return judge(p, rc, "", se, False, out, p.argv, 1.0)["behaviour"]
    assert behaviour("certdp: error: train.lr: not a number; allowed: a finite number > 0\n") == "refused-ok"
    assert behaviour("certdp: error: train.lr: not a number\n") == "no-allowed-part"
    assert behaviour("certdp: error: train.lr: not a number; allowed: \n") == "no-allowed-part"
    assert behaviour("certdp: error: config: not a number; allowed: x\n") == "wrong-key"
    assert behaviour("Traceback (most recent call last):\nValueError: x\n", rc=1) == "traceback"
    (tmp_path / "outputs").mkdir()
    assert behaviour("certdp: error: train.lr: not a number; allowed: x\n") == "unclean-refusal"
    u = Probe("u", ["--bogus"], "usage", extra={"token": "--bogus"})
    assert judge(u, 2, "", "Usage: certdp\nError: no such option --bogus\n", False, tmp_path, [], 1.0)["behaviour"] \
        == "unclean-refusal"


def _prober(*args, tmp_path, timeout=1200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.prober", "--root", str(ROOT), "--jobs", "1",
                           "--out", str(tmp_path), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def _rows(tmp_path) -> pd.DataFrame:
    (csv,) = tmp_path.glob("pass-*/probes.csv")
    return pd.read_csv(csv, keep_default_na=False)


# the probes of the surfaces that run in seconds (no finished run needed)
PROBER_SUBSET = (r"^(predict:(format 1|deep|binary|header|dup|staging|output is)|figures:experiment file "
                 r"(runs-scalar|run-scalar|profiles-list|laughs)|agtr:run=|"
                 r"feasibility:feasibility\.confidence\.values)")


@pytest.mark.slow
def test_a_fast_subset_of_the_prober_is_green(tmp_path):
    r = _prober("--surfaces", "--only", PROBER_SUBSET, tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = _rows(tmp_path)
    assert len(rows) >= 40
    bad = rows[~rows.got.isin(["refused-ok", "ran-ok", "skipped"])]
    assert bad.empty, bad[["id", "got", "note", "stderr_first"]].to_string()


@pytest.mark.slow
def test_the_hardening_probes_run_green_where_main_is_fixed(tmp_path):
    """A few of --hardening's regular probes (long folder names, bad cells in public rows) through
    the whole pass: listed, fixtures built, judged, counted by item."""
    r = _prober("--hardening", "--only", r"^agtr:(run=|out_root part|dataset\.path=csv/(inf|nan)10)", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = _rows(tmp_path)
    assert len(rows) == 5 and set(rows["item"]) == {2, 9}, rows[["id", "item"]].to_string()
    assert rows.got.isin(["refused-ok"]).all(), rows[["id", "got", "note", "stderr_first"]].to_string()
    assert "by issue 28 item" in r.stdout


@pytest.mark.slow
def test_probe_quick_runs(tmp_path):
    """``--quick`` (the device probes) through the script entry point, from another folder."""
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "probe.py"), "--root", str(ROOT), "--quick",
                        "--out", str(tmp_path / "probe"), "--jobs", "1"], capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert r.returncode == 0 and "refused-ok" in r.stdout, r.stderr[-2000:]


# ---------------------------------------------------------------- the hardening probes' judges (issue 28)
def test_the_neighbour_judge_flags_what_one_private_record_may_not_decide():
    """Planted outcomes of an unmodified copy's run and a changed copy's: the same everything is
    fine; a refusal, a moved split, a published preprocessing that differs or the planted value
    in a message is a privacy leak; noise in the released parameters is not."""
    from tools.prober.specials.loaders import compare
    doc = {"format": "certdp.released/2", "preprocessing": {"shift": [0.1], "scale": [1.0]},
           "releases": [{"mechanism": "laplace_p", "epsilon": 1.0}]}

    def record(rc=0, said="AGS on adult", shift=0.1, n=(30162, 14060)):
        return {"argv": ["ags"], "rc": rc, "se": "" if rc == 0 else "certdp: error: dataset: x; allowed: y\n",
                "to": False, "said": said, "sizes": (n,), "problems": [],
                "published": {"released.json": {**doc, "preprocessing": {**doc["preprocessing"], "shift": [shift]}}}}
    base = record()
    assert compare(base, record(), tokens=("Mars",), numbers=(12,))["behaviour"] == "ran-ok"
    assert compare(base, record(rc=2), tokens=("Mars",))["behaviour"] == "privacy-leak"
    assert compare(base, record(shift=0.2))["behaviour"] == "privacy-leak"
    assert "preprocessing.shift" in compare(base, record(shift=0.2))["note"]
    assert compare(base, record(n=(30161, 14060)))["behaviour"] == "privacy-leak"
    assert compare(base, record(said="unexpected native_country values ['Mars']"),
                   tokens=("Mars",))["behaviour"] == "privacy-leak"
    assert compare(base, record(said="adult.data record 12 has a text age"), numbers=(12,))["behaviour"] == \
        "privacy-leak"
    assert compare(record(rc=2), record())["behaviour"] == "inconclusive"


def test_published_files_are_compared_without_their_noise(tmp_path):
    import json

    from tools.prober.specials.loaders import differences, published
    for name, params in (("a", [1.0, 2.0]), ("b", [3.0, 4.0])):
        (tmp_path / name / "publish").mkdir(parents=True)
        (tmp_path / name / "publish" / "released.json").write_text(json.dumps(
            {"releases": [{"epsilon": 1, "parameters": params}], "preprocessing": {"shift": [0.0]}}))
    assert differences(published(tmp_path / "a"), published(tmp_path / "b")) == []
    (tmp_path / "b" / "publish" / "README.txt").write_text("x")
    assert differences(published(tmp_path / "a"), published(tmp_path / "b")) == ["README.txt"]


def test_the_house_probes_read_what_they_judge():
    from tools.prober.specials.audits import _rates
    from tools.prober.specials.house import _predictions, readme_commands
    assert readme_commands((ROOT / "README.md").read_text())[:1] and \
        all(not c.startswith("#") and c != "make install" for c in readme_commands((ROOT / "README.md").read_text()))
    assert readme_commands("# x\n## The two first commands\n\n```bash\nmake install  # a\ncertdp agtr  # b\n```\n") \
        == ["certdp agtr"]
    assert _predictions("mechanism,epsilon,row,prediction\nlaplace_p,1,0,1\nlaplace_p,1,1,0\n") == {0: "1", 1: "0"}
    assert _predictions("no csv\n") == {}
    cache = {"train/mlp": {"overhead": 0.04, "unit": 1.6e-8}, "ibp-tau/mlp": {"overhead": 0.4, "unit": 1e-15}}
    assert [k for k, v in _rates(cache) if not v >= 1e-12] == ["ibp-tau/mlp.unit"]


def test_the_judge_flags_a_refusal_with_exit_0_and_a_long_usage_error(tmp_path):
    info = Probe("l", ["list", "settings", "resume"], "info", extra={"no_error": True})
    assert judge(info, 0, "", "certdp: error: resume: no such command; allowed: agtr\n", False, tmp_path, [],
                 1.0)["behaviour"] == "misleading"
    assert judge(info, 0, "  seed = 0: integer\n", "", False, tmp_path, [], 1.0)["behaviour"] == "ran-ok"
    bare = Probe("b", [], "info", extra={"one_line_or_help": True})
    assert judge(bare, 2, "", "Usage: certdp\n" + "x\n" * 30, False, tmp_path, [], 1.0)["behaviour"] == \
        "unclean-refusal"
    assert judge(bare, 2, "", "certdp: error: COMMAND: missing; allowed: agtr, ...\n", False, tmp_path, [],
                 1.0)["behaviour"] == "refused-ok"
    assert judge(bare, 0, "Usage: certdp\n" + "x\n" * 30, "", False, tmp_path, [], 1.0)["behaviour"] == "ran-ok"


def test_the_estimates_judge_flags_floor_rates_and_accepts_an_accountants_call_rate():
    """A per-element rate at a floor is implausible; an accountant's entry is a rate of calls
    (unit 0 by design, its time the overhead) and is judged on its call time."""
    from tools.prober.specials.audits import implausible_rates
    engine = {"overhead": 0.005, "unit": 5.7e-7, "setup": 0.0, "probe": 0.08, "spread": 0.8}
    accountant = {"overhead": 0.92, "unit": 0.0, "setup": 0.0, "probe": 0.07, "spread": 0.4}
    assert implausible_rates([{"crown/1-1-mse/b125": engine, "accountant/pld": accountant}]) == []
    assert implausible_rates([{"ibp-tau/mlp": {**engine, "unit": 1e-15}}]) == ["ibp-tau/mlp.unit=1e-15"]
    assert implausible_rates([{"train/mlp": {**engine, "unit": 0.0}}]) == ["train/mlp.unit=0"]
    assert len(implausible_rates([{"accountant/pld": {**accountant, "overhead": 0.0}}])) == 1
    assert len(implausible_rates([{"accountant/pld": {**accountant, "unit": 1e-6}}])) == 1
