"""Resume as a user meets it (issue 28, items 5-8): a small csv run interrupted by SIGTERM after a
chosen step (certdp's test hook ``CERTDP_TEST_SIGTERM_AT_STEP``, a checkpoint after every step),
one thing changed, then ``certdp resume``.  A refusal must keep the checkpoint byte for byte; a
resume that runs must write the CSVs of an uninterrupted run of the same settings; a message that
suggests a command must be one that works as written."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from tools.prober.judge import refusal_problem
from tools.prober.model import Probe
from tools.prober.process import Ctx, base_env, fill, finish, launch, run_dirs
from tools.prober.specials.common import answer, crashed, run_cli, tree

RES = ["agtr", "dataset=csv", "dataset.target=y", "dataset.n_test=40", "dataset.output_range=[-5,5]",
       "train.steps=6", "staircase.k_max=4", "privacy.n_draws=5", "checkpoint_minutes=0", "progress=false"]
HOOK = "CERTDP_TEST_SIGTERM_AT_STEP"
AT = 8                           # all loops' steps together: nominal 6, then AGT's second step
COMPARED = ("results.csv", "certificate.csv")


class Failed(Exception):
    """The scenario's verdict, raised where it is found."""

    def __init__(self, behaviour: str, note: str, rc=None, se: str = "", argv=()):
        super().__init__(note)
        self.result = answer(behaviour, note, argv=argv, rc=rc, se=se)


def csvs(run: Path) -> dict:
    return {n: (run / n).read_bytes() for n in COMPARED if (run / n).is_file()}


def staging(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if ".incomplete-" in p.name]


class Scenario:
    """One probe's folder: its csv, its uninterrupted reference, its interrupted runs."""

    def __init__(self, p: Probe, ctx: Ctx, out: Path):
        self.p, self.ctx, self.out, self.n = p, ctx, out, 0
        self.data = out / "data.csv"
        shutil.copyfile(ctx.fx / "csv" / "good.csv", self.data)
        self.argv = RES + [f"dataset.path={self.data}"]
        self.root = out / "o"

    def cli(self, argv, *, env=None):
        self.n += 1
        return run_cli(self.ctx, argv, self.out / f"s{self.n}", env=env, timeout=self.p.timeout)

    def final(self, name="cut", root=None) -> Path:
        return (root or self.root) / "agtr" / "csv" / name

    def reference(self, *more, name="ref") -> dict:
        rc, so, se, to = self.cli(self.argv + list(more) + [f"run={name}", f"out_root={self.out / 'ref'}"])
        run = self.final(name, self.out / "ref")
        if rc != 0 or not run.is_dir():
            raise Failed("inconclusive", f"the uninterrupted run: exit {rc}", rc, se)
        return csvs(run)

    def cut(self, name="cut", *more, argv=None, at=AT) -> tuple[Path, str]:
        av = (argv or self.argv + list(more) + [f"run={name}"]) + [f"out_root={self.root}"]
        rc, so, se, to = self.cli(av, env={HOOK: str(at)})
        ck = self.final(name).with_name(f"{name}.resumable")
        if rc != 143 or (argv is None and not (ck / "state.pt").is_file()):
            raise Failed("inconclusive", f"the run was not interrupted with a checkpoint (exit {rc}; is "
                                         f"{HOOK} gone?)", rc, se, av)
        return ck, se

    def refused(self, argv, keys, ck: Path, kept: dict, *, say: str | None = None) -> None:
        """``argv`` must be refused in one line naming ``keys``, the checkpoint ``ck`` as ``kept``."""
        rc, so, se, to = self.cli(argv)
        bad = crashed(rc, se, to)
        if bad:
            raise Failed(bad, f"exit {rc}", rc, se, argv)
        if rc == 0:
            raise Failed("silent-replacement", "exit 0 where a refusal is correct (a run on what changed)", rc, se,
                         argv)
        if tree(ck) != kept:
            raise Failed("data-loss", f"exit {rc}: the checkpoint {ck.name} changed or is gone", rc, se, argv)
        if staging(self.out):
            raise Failed("unclean-refusal", f"exit {rc}: a staging folder left", rc, se, argv)
        problem = refusal_problem(rc, se, keys)
        if problem:
            raise Failed(problem[0], problem[1] or f"exit {rc}", rc, se, argv)
        if say and not re.search(say, se):
            raise Failed("misleading", f"the refusal does not say /{say}/", rc, se, argv)

    def resumed(self, argv, run: Path, ref: dict, what: str) -> None:
        """``argv`` must run and land ``run`` with the reference CSVs."""
        rc, so, se, to = self.cli(argv)
        bad = crashed(rc, se, to)
        if bad:
            raise Failed(bad, f"{what}: exit {rc}", rc, se, argv)
        if rc != 0:
            raise Failed("wrong-refusal", f"{what}: exit {rc}", rc, se, argv)
        if csvs(run) != ref:
            raise Failed("silent-replacement", f"{what}: {run.name}'s CSVs are not the uninterrupted run's"
                         + ("" if run.is_dir() else " (no run there)"), rc, se, argv)


def _input_gone_or_changed(s: Scenario, edit, *, both=False) -> str:
    ref = s.reference()
    ck, _ = s.cut()
    kept, original = tree(ck), s.data.read_bytes()
    edit(s.data)
    s.refused(["resume", str(s.final())], ("dataset.path",), ck, kept)
    if both:
        s.refused(s.argv + ["run=cut", "resume=true", f"out_root={s.root}"], ("dataset.path",), ck, kept)
    if s.data.with_suffix(".moved").exists():
        s.data.with_suffix(".moved").unlink()
    s.data.write_bytes(original)
    s.resumed(["resume", str(s.final())], s.final(), ref, "with the csv back")
    return "refused in one line, checkpoint kept; with the csv back the resume wrote the uninterrupted CSVs"


def _changed_value(path: Path) -> None:
    lines = path.read_text().splitlines()
    lines[5] = "0.5," + lines[5].split(",", 1)[1]
    path.write_text("\n".join(lines) + "\n")


def _copied_state(s: Scenario) -> str:
    ck, _ = s.cut()
    ck2, _ = s.cut("other", "train.lr=0.07")
    shutil.copyfile(ck2 / "state.pt", ck / "state.pt")
    kept, kept2 = tree(ck), tree(ck2)
    s.refused(["resume", str(s.final())], ("*",), ck, kept)
    if tree(ck2) != kept2:
        raise Failed("data-loss", "the other checkpoint changed")
    return "refused in one line; both checkpoints kept"


def _same_name(s: Scenario) -> str:
    """Two runs of one run=X started together, both interrupted: the checkpoint they leave must be
    one run's (its settings with its own state), so `certdp resume X` writes that run's CSVs or
    refuses in one line."""
    refs = {seed: s.reference(f"seed={seed}", name=f"ref{seed}") for seed in (1, 2)}
    procs = []
    for seed in (1, 2):
        folder = s.out / f"x{seed}"
        folder.mkdir()
        av = [fill(a, s.ctx, folder) for a in s.argv + [f"seed={seed}", "run=X", f"out_root={s.root}"]]
        procs.append((launch(s.ctx, av, folder, base_env(s.ctx, folder, {HOOK: str(AT)})), folder))
    ends = [finish(proc, s.p.timeout, folder) for proc, folder in procs]
    for rc, so, se, to in ends:
        bad = crashed(rc, se, to)
        if bad:
            raise Failed(bad, f"one of the two runs: exit {rc}", rc, se)
    if not (s.final("X").with_name("X.resumable") / "state.pt").is_file():
        raise Failed("inconclusive", f"no checkpoint X.resumable (exits {[e[0] for e in ends]})")
    argv = ["resume", str(s.final("X"))]
    rc, so, se, to = s.cli(argv)
    bad = crashed(rc, se, to)
    if bad:
        raise Failed(bad, f"resume X: exit {rc}", rc, se, argv)
    if rc != 0:
        problem = refusal_problem(rc, se)
        if problem:
            raise Failed(problem[0], f"resume X: {problem[1] or f'exit {rc}'}", rc, se, argv)
        return "resume X refused in one line"
    config = (s.final("X") / "config.yaml").read_text() if (s.final("X") / "config.yaml").is_file() else ""
    m = re.search(r"^seed: (\d+)", config, re.M)
    seed = int(m.group(1)) if m else None
    if seed not in refs or csvs(s.final("X")) != refs[seed]:
        raise Failed("silent-replacement", f"resume X (exit 0) wrote CSVs that are not run seed={seed}'s: one run's "
                                           f"settings with the other's state", rc, se, argv)
    return f"the two runs (exits {[e[0] for e in ends]}) left one checkpoint; resume X wrote seed={seed}'s CSVs"


def _moved(s: Scenario, loose: bool) -> str:
    ref = s.reference()
    ck, _ = s.cut()
    where = s.out / "loose" / ck.name if loose else s.final(root=s.out / "elsewhere").with_name(ck.name)
    where.parent.mkdir(parents=True)
    ck.rename(where)
    if loose:
        kept = tree(where)
        s.refused(["resume", str(where)], ("*",), where, kept)
        started = [d for d in run_dirs(s.out) if "ref" not in d.parts] + \
            [p for p in s.out.rglob("*.resumable") if p != where]
        if started:
            raise Failed("data-loss", f"something started elsewhere: {started[0]}")
        return "refused in one line, the moved checkpoint kept, nothing started"
    landed = where.with_name("cut")
    s.resumed(["resume", str(where)], landed, ref, "resume of the moved checkpoint")
    if s.final().exists():
        raise Failed("silent-replacement", f"a run landed at the old place {s.final()} as well")
    log = (landed / "log.txt").read_text(errors="replace") if (landed / "log.txt").is_file() else ""
    if "resumed" not in log:
        raise Failed("silent-replacement", "its log.txt does not say it resumed (started over from step 0?)")
    return "continued where it lies, landed beside it with the uninterrupted CSVs"


def _taken_final(s: Scenario) -> str:
    ref = s.reference()
    ck, _ = s.cut()
    rc, so, se, to = s.cli(s.argv + ["run=other", "train.steps=2", f"out_root={s.root}"])
    if rc != 0:
        raise Failed("inconclusive", f"the run that takes the folder: exit {rc}", rc, se)
    s.final("other").rename(s.final())
    s.refused(["resume", str(s.final())], ("*",), ck, tree(ck))
    rc, so, se, to = s.cli(["resume", str(s.final())])
    m = re.search(r"`certdp (resume [^`]+)`", se)
    if not m:
        raise Failed("misleading", "the refusal suggests no `certdp resume ...` command", rc, se)
    s.resumed(shlex.split(m.group(1)), s.final(), ref, f"the suggested `certdp {m.group(1)}`")
    return f"the suggested `certdp {m.group(1)}` wrote the uninterrupted CSVs"


def _rerun_resumable(s: Scenario) -> str:
    ck, _ = s.cut()
    kept = tree(ck)
    for target in (ck, s.final()):
        s.refused(["rerun", str(target)], ("*",), ck, kept, say=r"certdp resume")
    return "both refused in one line pointing to certdp resume; checkpoint kept"


def _sweep_message(s: Scenario) -> str:
    sweep = ["agtr", "-m", *[a for a in s.argv[1:] if not a.startswith("train.steps=")], "train.steps=2,6"]
    _, se = s.cut(argv=sweep, at=6)            # job 0 (2 + 2 steps) finishes, job 1 is cut
    sweep.append(f"out_root={s.root}")
    m = re.search(r"same command line (?:and|with) ((?:[\w.]+=\S+\s*)+)", se)
    if not m:
        raise Failed("misleading", "the interruption suggests no way to finish the sweep", 143, se, sweep)
    more = [a.rstrip(".,;)") for a in m.group(1).split()]
    rc, so, se2, to = s.cli(sweep + more)
    bad = crashed(rc, se2, to)
    if bad or rc != 0:
        raise Failed(bad or "misleading", f"the suggested command (… {' '.join(more)}): exit {rc}", rc, se2,
                     sweep + more)
    done = [d for d in run_dirs(s.root) if (d / "results.csv").is_file()]
    if len(done) != 2:
        raise Failed("misleading", f"the suggested command left {len(done)} of 2 jobs finished", rc, se2, sweep + more)
    return f"the suggested `… {' '.join(more)}` finished both jobs"


def _step_named(s: Scenario) -> str:
    _, se = s.cut()
    if not re.search(r"saved at \S+ step \d+ of \d+", se):
        raise Failed("misleading", "the interruption line does not say which step is kept", 143, se)
    return "the interruption line names the step kept"


SCENARIOS = {
    "moved-input": lambda s: _input_gone_or_changed(s, lambda p: p.rename(p.with_suffix(".moved"))),
    "semicolon": lambda s: _input_gone_or_changed(s, lambda p: p.write_text(p.read_text().replace(",", ";"))),
    "changed-value": lambda s: _input_gone_or_changed(s, _changed_value, both=True),
    "copied-state": _copied_state, "same-name": _same_name,
    "moved-loose": lambda s: _moved(s, True), "moved-layout": lambda s: _moved(s, False),
    "taken-final": _taken_final, "rerun-resumable": _rerun_resumable, "sweep-message": _sweep_message,
    "step-named": _step_named,
}


def sp_resume(p: Probe, ctx: Ctx, out: Path) -> dict:
    s = Scenario(p, ctx, out)
    try:
        note = SCENARIOS[p.extra["scenario"]](s)
    except Failed as f:
        return f.result
    return answer("ran-ok", note)


SPECIALS = {"resume": sp_resume}
