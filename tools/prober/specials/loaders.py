"""Neighbouring datasets through the built-in loaders (issue 28, items 1-2): the same run on an
unmodified copy and on a copy with one private record changed must agree on everything that is
not noise -- whether the run succeeds, its sizes, ``publish/`` apart from the noised parameters --
and say nothing of the changed record."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from tools.prober.bases import CSV
from tools.prober.checks import check_csv
from tools.prober.fixtures_hardening import ADULT_EDITS, CSV_PRIVATE_ROW
from tools.prober.model import Probe, merge
from tools.prober.process import Ctx, csv_files, run_dirs
from tools.prober.specials.common import answer, crashed, mentions, run_cli, said, sizes

ADULT = ["ags", "dataset=adult", "train.steps=2", "ags.ablation_n=[]", "privacy.epsilons=[10]", "privacy.n_draws=2",
         "staircase.k_max=4", "seed=0", "dataset.split_seed=0", "progress=false", "run=r"]
_BASE: dict = {}                 # (fixtures, what) -> the unmodified run's record, once a pass
_LOCK = threading.Lock()


def published(run_dir: Path) -> dict:
    """``publish/``'s files, the released parameters (the noise) left out of released.json."""
    out = {}
    pub = run_dir / "publish"
    for f in sorted(pub.glob("*")) if pub.is_dir() else []:
        if f.name == "released.json":
            try:
                doc = json.loads(f.read_text())
            except ValueError:
                out[f.name] = "unreadable"
                continue
            for rel in doc.get("releases", []) if isinstance(doc, dict) else []:
                if isinstance(rel, dict):
                    rel.pop("parameters", None)
            out[f.name] = doc
        else:
            out[f.name] = f.read_text(errors="replace")
    return out


def differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    """The keys (dotted) whose values differ between two published records."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return [prefix.rstrip(".") or "(the whole file)"] if a != b else []
    out = []
    for k in sorted(set(a) | set(b)):
        out += differences(a.get(k), b.get(k), f"{prefix}{k}.")
    return out


def run_record(ctx: Ctx, argv: list, folder: Path, timeout: float) -> dict:
    rc, so, se, to = run_cli(ctx, argv + [f"out_root={folder / 'o'}"], folder, timeout=timeout)
    dirs = run_dirs(folder / "o") if (folder / "o").exists() else []
    run = dirs[0] if len(dirs) == 1 else None
    probs = [x for f in (csv_files(run) if run else []) for x in check_csv(f, argv[0])]
    # what it said, its own paths left out (a probe's folder is named after what it plants)
    text = said(folder, so, se).replace(str(folder.parent), "<probe>").replace(str(ctx.fx), "<fixtures>")
    return {"argv": argv, "rc": rc, "so": so, "se": se, "to": to, "said": text,
            "sizes": sizes(run) if run else None, "published": published(run) if run else {}, "problems": probs}


def baseline(ctx: Ctx, key: str, argv: list, out: Path, timeout: float) -> dict:
    """The unmodified run of ``key``, run once a pass (in the first probe's folder that needs it)."""
    with _LOCK:
        k = (str(ctx.fx), key)
        if k not in _BASE:
            _BASE[k] = run_record(ctx, argv, out / "unmodified", timeout)
        return _BASE[k]


def compare(base: dict, var: dict, *, tokens=(), numbers=()) -> dict:
    """The behaviour of the changed copy's run ``var`` against the unmodified one's ``base``."""
    args = {"argv": var["argv"], "rc": var["rc"], "se": var["se"]}
    if base["rc"] != 0:
        return answer("inconclusive", f"the unmodified copy did not run: exit {base['rc']}: "
                                      f"{(base['se'].strip().splitlines() or [''])[-1][:200]}", **args)
    bad = crashed(var["rc"], var["se"], var["to"])
    if bad:
        return answer(bad, f"exit {var['rc']}", **args)
    seen = set(mentions(base["said"], tokens=tokens, numbers=numbers))        # said of the unmodified copy too
    leaks = [m for m in mentions(var["said"], tokens=tokens, numbers=numbers) if m not in seen]
    if var["rc"] != 0:
        return answer("privacy-leak", f"exit {var['rc']} where the unmodified copy ran: one private record decides "
                                      f"whether the run succeeds" + (f"; it says {', '.join(leaks)}" if leaks else ""),
                      **args)
    notes = []
    if var["sizes"] != base["sizes"]:
        notes.append(f"the split moved: (n_train, n_test) {var['sizes']} vs {base['sizes']}")
    diff = differences(var["published"], base["published"])
    if diff:
        notes.append(f"publish/ differs beyond the noised parameters: {', '.join(diff[:6])}")
    if leaks:
        notes.append(f"it says {', '.join(leaks)}")
    if notes:
        return answer("privacy-leak", "; ".join(notes), **args)
    if var["problems"]:
        return answer("exit0-bad-output", "; ".join(var["problems"][:3]), **args)
    return answer("ran-ok", "the same outcome, sizes and publish/ (noise aside); nothing said of the record", **args)


def sp_adult_neighbour(p: Probe, ctx: Ctx, out: Path) -> dict:
    if ctx.have.get("adult") is not True:
        return answer("inconclusive", str(ctx.have.get("adult", "no adult fixture")))
    split, variant = p.extra["split"], p.extra["variant"]
    argv = ADULT + [f"dataset.split={split}"]
    base = baseline(ctx, f"adult-{split}", argv + [f"dataset.path={ctx.fx / 'adult' / 'orig'}"], out, p.timeout)
    var = run_record(ctx, argv + [f"dataset.path={ctx.fx / 'adult' / f'{split}-{variant}'}"], out / "changed",
                     p.timeout)
    line = ctx.have["adult_line"][split]
    return compare(base, var, tokens=(ADULT_EDITS[variant][2],), numbers=(line, line + 1))


def sp_csv_private(p: Probe, ctx: Ctx, out: Path) -> dict:
    if ctx.have.get("hard") is not True:
        return answer("inconclusive", str(ctx.have.get("hard", "no fixture")))
    argv = ["agtr", *merge(CSV, ["progress=false"])]
    base = baseline(ctx, "csv-good", argv, out, p.timeout)
    var = run_record(ctx, merge(argv, [f"dataset.path={p.extra['table']}"]), out / "changed", p.timeout)
    # data row 7: the file's line 9, the table's row 8 counted from 1
    return compare(base, var, tokens=("\\x00", "\\xff", "U+0000"),
                   numbers=(CSV_PRIVATE_ROW, CSV_PRIVATE_ROW + 1, CSV_PRIVATE_ROW + 2))


SPECIALS = {"adult-neighbour": sp_adult_neighbour, "csv-private": sp_csv_private}
