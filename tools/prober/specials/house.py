"""The house as a new user meets it (issue 28, items 12-16): ``certdp predict``'s edges, a rerun
whose input is gone, the README's first commands as written in a fresh copy, ``make clean`` and
``import certdp`` in a fresh interpreter."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from tools.prober.judge import refusal_problem
from tools.prober.model import Probe
from tools.prober.process import Ctx, base_env, run_dirs
from tools.prober.specials.common import answer, crashed, run_cli, tree

HEADER = "mechanism,epsilon,row,prediction"
FRESH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"     # a new shell: nothing activated


def _predictions(so: str) -> dict[int, str]:
    lines = [ln for ln in so.splitlines() if ln.strip()]
    if not lines or lines[0] != HEADER:
        return {}
    return {int(c[2]): c[3] for c in (ln.split(",") for ln in lines[1:]) if len(c) == 4 and c[2].isdigit()}


def sp_predict_edge(p: Probe, ctx: Ctx, out: Path) -> dict:
    if ctx.have.get("hard") is not True:
        return answer("inconclusive", str(ctx.have.get("hard", "no fixture")))
    pred, hard, case = ctx.fx / "pred", ctx.fx / "hard", p.extra["case"]
    if case == "overflow":
        argv = ["predict", str(hard / "overflow.json"), "--input", str(hard / "overflow.csv")]
        rc, so, se, to = run_cli(ctx, argv, out)
        bad = crashed(rc, se, to)
        if bad:
            return answer(bad, f"exit {rc}", argv=argv, rc=rc, se=se)
        if rc != 0:
            problem = refusal_problem(rc, se, ("--input",))
            return answer(*(problem or ("refused-ok", "")), argv=argv, rc=rc, se=se)
        got, want = _predictions(so), dict(enumerate(str(v) for v in ctx.have["overflow_labels"]))
        if got != want:
            return answer("exit0-bad-output", f"labels {got}, exact scores give {want}", argv=argv, rc=rc, se=se)
        return answer("ran-ok", "each label the sign of the exact score", argv=argv, rc=rc, se=se)
    argv = ["predict", str(pred / "ok2.json"), "--input", str(pred / "t.csv")]
    if case == "dash":
        rc, so, se, to = run_cli(ctx, argv + ["--output", "-"], out / "cwd")
        bad = crashed(rc, se, to)
        if bad or rc != 0:
            return answer(bad or "wrong-refusal", f"exit {rc}", argv=argv, rc=rc, se=se)
        if (out / "cwd" / "-").exists():
            return answer("exit0-bad-output", "wrote a file named '-' instead of standard output", argv=argv, rc=rc,
                          se=se)
        if not _predictions(so):
            return answer("exit0-bad-output", "no predictions on standard output", argv=argv, rc=rc, se=se)
        return answer("ran-ok", "the predictions on standard output", argv=argv, rc=rc, se=se)
    rc, so, se, to = run_cli(ctx, argv, out / "stdout")
    rc2, _, se2, to2 = run_cli(ctx, argv + ["--output", str(out / "p.csv")], out / "file")
    bad = crashed(rc, se, to) or crashed(rc2, se2, to2)
    if bad or rc or rc2:
        return answer(bad or "wrong-refusal", f"exits {rc}, {rc2}", argv=argv, rc=rc, se=se + se2)
    written = (out / "p.csv").read_text() if (out / "p.csv").is_file() else ""
    if written.strip() != so.strip():
        diff = next((f"{a!r} vs {b!r}" for a, b in zip(so.splitlines(), written.splitlines()) if a != b), "")
        return answer("misleading", f"stdout and the file differ: {diff}", argv=argv, rc=rc, se=se)
    return answer("ran-ok", "the same bytes", argv=argv, rc=rc, se=se)


def sp_rerun_deleted_input(p: Probe, ctx: Ctx, out: Path) -> dict:
    shutil.copyfile(ctx.fx / "csv" / "good.csv", out / "data.csv")
    argv = p.extra["argv"] + [f"dataset.path={out / 'data.csv'}", "run=r", f"out_root={out / 'o'}"]
    rc, so, se, to = run_cli(ctx, argv, out / "first")
    dirs = run_dirs(out / "o") if (out / "o").exists() else []
    if rc != 0 or len(dirs) != 1:
        return answer("inconclusive", f"the first run: exit {rc}", rc=rc, se=se)
    kept = tree(dirs[0])
    (out / "data.csv").unlink()
    argv = ["rerun", str(dirs[0]), f"out_root={out / 'o2'}"]
    rc, so, se, to = run_cli(ctx, argv, out / "second")
    bad = crashed(rc, se, to)
    if bad:
        return answer(bad, f"exit {rc}", argv=argv, rc=rc, se=se)
    if tree(dirs[0]) != kept:
        return answer("data-loss", "the finished run changed", argv=argv, rc=rc, se=se)
    problem = refusal_problem(rc, se, ("dataset.path", "RUN_DIR", "rerun"))
    return answer(*(problem or ("refused-ok", "")), argv=argv, rc=rc, se=se)


def clone(ctx: Ctx, dst: Path) -> Path:
    """A fresh copy of the probed tree's files (git's tracked ones where it is a checkout)."""
    ls = subprocess.run(["git", "-C", str(ctx.root), "ls-files", "-z"], capture_output=True)
    names = [n for n in ls.stdout.decode().split("\0") if n] if ls.returncode == 0 else []
    if not names:
        shutil.copytree(ctx.root, dst, ignore=shutil.ignore_patterns(".git", ".venv", "build", "__pycache__"))
        return dst
    for n in names:
        src = ctx.root / n
        if src.is_file():
            (dst / n).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / n)
    return dst


def stand_in_install(ctx: Ctx, tree_dir: Path) -> None:
    """What `make install` leaves: ``.venv`` with the prober's interpreter's packages and certdp
    editable from ``tree_dir``, its ``certdp`` script in ``.venv/bin`` (offline: no download)."""
    venv = tree_dir / ".venv"
    subprocess.run([ctx.python, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    site = subprocess.run([ctx.python, "-c", "import site; print('\\n'.join(site.getsitepackages()))"],
                          capture_output=True, text=True, check=True).stdout.split()
    py = venv / "bin" / "python"
    mine = subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True,
                          text=True, check=True).stdout.strip()
    Path(mine, "certdp-probe.pth").write_text("\n".join([str(tree_dir), *site]) + "\n")
    script = venv / "bin" / "certdp"
    script.write_text(f"#!{py}\nimport sys\nfrom certdp.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)


def readme_commands(text: str) -> list[str]:
    """The command lines of the README's first-commands block (comments and `make install` left out)."""
    m = re.search(r"^##[^\n]*first command[^\n]*\n(.*?)```(?:bash|sh)?\n(.*?)```", text, re.S | re.I | re.M)
    lines = [ln.split("#", 1)[0].strip() for ln in (m.group(2).splitlines() if m else [])]
    return [ln for ln in lines if ln and ln != "make install"]


def sp_readme(p: Probe, ctx: Ctx, out: Path) -> dict:
    cmds = readme_commands((ctx.root / "README.md").read_text())
    if not cmds:
        return answer("inconclusive", "no first-commands block in README.md")
    tree_dir = clone(ctx, out / "clone")
    stand_in_install(ctx, tree_dir)
    env = {k: v for k, v in base_env(ctx, out).items() if k not in ("PYTHONPATH",)}
    env.update(PATH=FRESH_PATH, HOME=os.environ.get("HOME", str(out)))
    notes = []
    for cmd in cmds:
        proc = subprocess.Popen(["bash", "-c", cmd], cwd=tree_dir, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
        try:
            _, se = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            notes.append(f"`{cmd}` started")
            continue
        if proc.returncode != 0:
            last = (se.strip().splitlines() or [""])[-1][:200]
            return answer("traceback" if "Traceback" in se else "wrong-refusal",
                          f"`{cmd}` as written: exit {proc.returncode}: {last}", argv=["bash", "-c", cmd],
                          rc=proc.returncode, se=se)
        notes.append(f"`{cmd}` exit 0")
    return answer("ran-ok", "; ".join(notes))


def sp_make_clean(p: Probe, ctx: Ctx, out: Path) -> dict:
    tree_dir = clone(ctx, out / "clone")
    run = tree_dir / "outputs" / "agtr" / "linear" / "my-run"
    run.mkdir(parents=True, exist_ok=True)
    (run / "results.csv").write_text("epsilon,mae\n1,0.5\n")
    (run / "config.yaml").write_text("command: agtr\n")
    (tree_dir / "build" / "site").mkdir(parents=True, exist_ok=True)
    (tree_dir / "build" / "site" / "index.html").write_text("<html></html>\n")
    (tree_dir / ".pytest_cache").mkdir(exist_ok=True)
    before = tree(tree_dir / "outputs")
    proc = subprocess.run(["make", "clean"], cwd=tree_dir, capture_output=True, text=True, timeout=120)
    after = tree(tree_dir / "outputs")
    if before != after:
        gone = sorted(set(before) - set(after))
        return answer("data-loss", f"make clean (exit {proc.returncode}) deleted or changed files under outputs/: "
                                   f"{', '.join(gone[:3])}", argv=["make", "clean"], rc=proc.returncode, se=proc.stderr)
    if proc.returncode != 0:
        return answer("wrong-refusal", f"exit {proc.returncode}", argv=["make", "clean"], rc=proc.returncode,
                      se=proc.stderr)
    if (tree_dir / "build" / "site").exists():
        return answer("exit0-bad-output", "outputs/ kept, but build/site was not removed", argv=["make", "clean"], rc=0)
    return answer("ran-ok", "outputs/ kept byte for byte, build/site removed", argv=["make", "clean"], rc=0)


# What a fresh interpreter sees around `import certdp`: the handlers of the catchable signals
# before and after, calls of glibc's mallopt through ctypes, and whether a 64 MiB allocation is
# then served by mmap (glibc's default) or by the heap (mallopt(M_MMAP_MAX, 0)).
BEFORE_IMPORT = r"""
import ctypes, json, signal
def handlers():
    out = {}
    for s in signal.valid_signals():
        try:
            out[signal.Signals(s).name] = repr(signal.getsignal(s))
        except (ValueError, OSError):
            pass
    return out
def heap():
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith("[heap]"):
            a, b = line.split()[0].split("-")
            return int(b, 16) - int(a, 16)
    return 0
calls = []
class Recording(ctypes.CDLL):
    def __getattr__(self, name):
        if name == "mallopt":
            calls.append(name)
        return super().__getattr__(name)
ctypes.CDLL = Recording
before = handlers()
import certdp
"""
AFTER_IMPORT = r"""
after = handlers()
h0 = heap(); block = bytearray(64 << 20); grown = heap() - h0; del block
print(json.dumps({"changed": sorted(k for k in before if before[k] != after.get(k)), "mallopt": len(calls),
                  "heap_grew_mib": grown / 2 ** 20}))
"""


def _effects(r: dict) -> str:
    return ", ".join(filter(None, [
        f"signal handlers changed ({', '.join(r['changed'])})" if r["changed"] else "",
        "mallopt called" if r["mallopt"] else "",
        f"a 64 MiB block came from the heap (+{r['heap_grew_mib']:.0f} MiB: mmap turned off)"
        if r["heap_grew_mib"] >= 60 else ""]))


def sp_import(p: Probe, ctx: Ctx, out: Path) -> dict:
    env = base_env(ctx, out)
    lib = out / "libuser"                 # a program whose package imports certdp, run as `python -m libuser`
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "__init__.py").write_text(BEFORE_IMPORT)
    (lib / "__main__.py").write_text("from libuser import *  # noqa: F401,F403\n" + AFTER_IMPORT)
    found = {}
    for how, argv in (("python -c 'import certdp'", ["-c", BEFORE_IMPORT + AFTER_IMPORT]),
                      ("python -m libuser (its package imports certdp)", ["-m", "libuser"])):
        proc = subprocess.run([ctx.python, *argv], cwd=out, env={**env, "PYTHONPATH": f"{out}:{env['PYTHONPATH']}"},
                              capture_output=True, text=True, timeout=p.timeout)
        if proc.returncode != 0:
            return answer("traceback" if "Traceback" in proc.stderr else "inconclusive",
                          f"{how}: exit {proc.returncode}", rc=proc.returncode, se=proc.stderr)
        found[how] = json.loads(proc.stdout.strip().splitlines()[-1])
    bad = [f"{how}: {_effects(r)}" for how, r in found.items() if _effects(r)]
    if bad:
        return answer("exit0-bad-output", "; ".join(bad))
    return answer("ran-ok", "no signal handler changed, mallopt untouched, a 64 MiB block still from mmap")


SPECIALS = {"predict-edge": sp_predict_edge, "rerun-deleted-input": sp_rerun_deleted_input, "readme": sp_readme,
            "make-clean": sp_make_clean, "import": sp_import}
