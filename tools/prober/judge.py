"""The judge: one probe's outcome (exit status, standard output and error, the files left) turned
into a behaviour of :data:`tools.prober.model.BEHAVIOURS`, and the grammar of what certdp prints
(a one-line refusal ``certdp: error: <key>: ...; allowed: ...``, a traceback)."""

from __future__ import annotations

import re
from pathlib import Path

from tools.prober.checks import judge_outputs
from tools.prober.model import Probe
from tools.prober.process import Ctx, csv_files, fill, nonempty_lines

TRACEBACK = re.compile(r"Traceback \(most recent call last\)|Error executing job|"
                       r"^\w+(Error|Exception)\b(:|$)", re.M)
ERRLINE = re.compile(r"^certdp: error: ([^\s:]+):")
EXCLINE = re.compile(r"^[\w.]*(Error|Exception|Interrupt|Warning)\b.*", re.M)


def exception_line(stderr: str) -> str:
    """The last ``SomeError: ...`` line of a traceback (Hydra ends with a hint line instead)."""
    found = [m.group(0) for m in EXCLINE.finditer(stderr)]
    return found[-1] if found else (nonempty_lines(stderr) or [""])[-1]


def key_matches(named: str | None, keys: tuple) -> bool:
    if named is None:
        return False
    for k in keys:
        if k == "*" or named == k or named.startswith(k + "=") or (k.endswith(".*") and named.startswith(k[:-1])):
            return True
    return False


def lines_info(se: str) -> tuple[list[str], dict]:
    """The non-empty lines of ``se`` and its first and last line (300 characters each)."""
    lines = nonempty_lines(se)
    return lines, {"first": (lines or [""])[0][:300], "last": (lines or [""])[-1][:300]}


def refusal_problem(rc, se, keys=()) -> tuple[str, str] | None:
    """None when ``se`` is one refusal line naming one of ``keys`` with an allowed part."""
    lines = nonempty_lines(se)
    if TRACEBACK.search(se):
        return "traceback", ""
    if rc != 2 or len(lines) != 1 or not ERRLINE.match(lines[0]):
        return "unclean-refusal", f"exit {rc}, {len(lines)} stderr line(s)"
    if keys and not key_matches(ERRLINE.match(lines[0]).group(1), keys):
        return "wrong-key", f"named {ERRLINE.match(lines[0]).group(1)}"
    if not re.search(r"; allowed\b[^:;]*: \S", lines[0]):
        return "no-allowed-part", ""
    return None


def judge(p: Probe, rc, so, se, timed_out, out: Path, argv: list, seconds: float, ctx: Ctx | None = None) -> dict:
    """The behaviour of a regular probe (not a special one) from its exit status ``rc``, its
    standard output ``so`` and error ``se`` and the folder ``out`` it ran in; ``ctx`` gives the
    fixtures' facts (a predict table's true accuracy, where a cache copy lies)."""
    command = p.argv[0] if p.argv else ""
    lines = nonempty_lines(se)
    first = lines[0] if lines else ""
    last = exception_line(se) if lines else ""
    tb = bool(TRACEBACK.search(se)) or (rc is not None and rc < 0)
    m = ERRLINE.match(first)
    named = m.group(1) if m else None
    csvs = csv_files(out / "o") if (out / "o").exists() else []
    note = ""
    if p.extra.get("judge") == "predict" and not timed_out and not tb:
        got, note = judge_predict(p, rc, so, se, out, ctx)
        return {"behaviour": got, "note": note, "named": named or "", "first": first[:300], "last": last[:300]}
    if timed_out:
        got = "timeout"
    elif command == "audit" and rc == 1 and not tb and csvs:
        got, note = judge_outputs(p, argv, out, command)
        if got != "audit-violation":
            got, note = "unclean-refusal", f"exit 1 without an audit violation; {note}".strip("; ")
    elif p.expect in ("refuse", "either") or (p.expect == "run" and rc != 0):
        if rc == 0:
            if p.expect == "refuse":
                got, note = judge_outputs(p, argv, out, command, count=False)
                got = "exit0-bad-output" if got == "exit0-bad-output" else "silent-replacement"
                if got == "silent-replacement":
                    note = ("exit 0 on invalid input; " + note).strip("; ")
            else:
                got, note = judge_outputs(p, argv, out, command)
        elif tb:
            got = "traceback"
            if rc is not None and rc < 0:
                note = f"killed by signal {-rc}"
        elif rc == 2 and len(lines) == 1 and first.startswith("certdp: error:"):
            if p.expect == "run":
                got = "wrong-refusal"
            elif not key_matches(named, p.keys):
                got, note = "wrong-key", f"named {named or 'no key'}, expected {'|'.join(p.keys)}"
            elif not re.search(r"; allowed\b[^:;]*: \S", first):
                got, note = "no-allowed-part", "the refusal does not say what is allowed"
            elif csvs:
                got, note = "unclean-refusal", f"left {len(csvs)} CSV(s): {csvs[0].name}"
            elif (out / "outputs").exists():
                got, note = "unclean-refusal", "left outputs/ in the working folder"
            elif p.early and late(out):
                got, note = "late-refusal", "refused after training/certifying"
            elif p.must_say and not re.search(p.must_say, first):
                got, note = "misleading", f"message lacks /{p.must_say}/"
            elif p.extra.get("kept_aside") and not kept_aside(out, p, ctx):
                got, note = "misleading", "the bad cache file was deleted, not kept aside"
            else:
                got = "refused-ok"
        elif rc not in (1, 2) or not lines:
            got, note = "traceback", f"crashed (exit {rc}) without a message"
        else:
            got = "wrong-refusal" if p.expect == "run" else "unclean-refusal"
            if got == "unclean-refusal":
                note = f"exit {rc}, {len(lines)} stderr line(s)" + (f", left {len(csvs)} CSV(s)" if csvs else "")
    elif p.expect == "run":
        got, note = judge_outputs(p, argv, out, command)
    elif p.expect == "usage":
        tok = p.extra.get("token", "")
        if tb:
            got = "traceback"
        elif rc == 2 and tok in (se + so) and len(lines) > 1:
            got, note = "unclean-refusal", f"a usage error of {len(lines)} lines"
        elif rc == 2 and tok in (se + so):
            got = "refused-ok"
        elif rc == 0:
            got = "silent-replacement"
        else:
            got, note = "unclean-refusal", f"exit {rc}"
    elif p.expect == "info":
        said = [ln for ln in nonempty_lines(so + "\n" + se) if ERRLINE.match(ln)]
        if tb:
            got = "traceback"
        elif p.extra.get("no_error") and rc == 0 and said:
            got, note = "misleading", f"exit 0 after a refusal line: {said[0][:120]}"
        elif p.extra.get("one_line_or_help") and rc != 0:
            got, note = ("refused-ok", "") if rc == 2 and len(lines) == 1 else \
                ("unclean-refusal", f"exit {rc}, {len(lines)} stderr line(s): one line or the help with exit 0")
        elif (rc == 0 or (p.extra.get("help_ok") and rc == 2)) and (so.strip() or se.strip()):
            got = "ran-ok"
        else:
            got, note = "wrong-refusal", f"exit {rc}"
    else:
        got = "inconclusive"
    return {"behaviour": got, "note": note, "named": named or "", "first": first[:300], "last": last[:300]}


def late(out: Path) -> bool:
    for log in out.rglob("log.txt"):
        text = log.read_text(errors="replace")
        if re.search(r"non-private|certified \d+ radii|AGT .* s over|nonprivate", text):
            return True
    return False


def kept_aside(out: Path, p: Probe, ctx: Ctx) -> bool:
    """The checksum probe's cache copy: the bad bytes must still exist somewhere in the cache."""
    env_cache = Path(fill(p.env.get("CERTDP_CACHE", ""), ctx, out))
    want = b"not the california table\n" * 40
    return any(f.is_file() and f.stat().st_size == len(want) and f.read_bytes() == want
               for f in env_cache.rglob("*")) if env_cache.exists() else False


def judge_predict(p: Probe, rc, so, se, out: Path, ctx: Ctx | None) -> tuple[str, str]:
    """A valid predict: exit 0, the predictions CSV on stdout, and each release's accuracy the
    true one (computed when the fixture was written)."""
    want = (ctx.have if ctx else {}).get("pred_acc", {}).get(p.extra.get("acc"))
    if rc != 0:
        return "wrong-refusal", f"exit {rc}"
    lines = [x for x in so.splitlines() if x.strip()]
    if not lines or lines[0] != "mechanism,epsilon,row,prediction" or len(lines) < 2:
        return "exit0-bad-output", "no predictions CSV on stdout"
    got = [float(m) for m in re.findall(r"accuracy ([0-9.]+)", se)]
    if want is not None and (not got or any(abs(g - want) > 6e-5 for g in got)):
        return "silent-replacement", f"accuracy {got} (true {want:.4f})"
    return "ran-ok", ""
