"""Issue 28, items 9 and 12-16: every surface as a new user meets it -- long folder names,
``certdp predict``'s edges, one format for every refusal, the README's commands, ``make clean``
and ``import certdp`` (:mod:`tools.prober.specials.house` for the ones that are more than one
command line)."""

from __future__ import annotations

from tools.prober.bases import CSV
from tools.prober.model import Table

LONG = "r" * 300
HARD = "{fx}/hard"
OK2 = "{fx}/pred/ok2.json"
ONE_LINE = "exit 2 and one line `certdp: error: <key>: <problem>; allowed: <what>`"


def add(t: Table) -> None:
    _names(t)
    _predict(t)
    _refusals(t)
    _house(t)


def _names(t: Table) -> None:
    with t.marked(hardening=True, item=9, correct=f"{ONE_LINE} naming the key, no traceback, nothing written"):
        t.add("agtr", [f"run={LONG}"], "refuse", "run", category="refusal", pid="agtr:run= 300 characters")
        t.add("agtr", [f"out_root={{out}}/{LONG}"], "refuse", "out_root", category="refusal", out_root=False,
              pid="agtr:out_root part of 300 characters (its parent exists)")
        t.add("agtr", [f"run=a/{LONG}/b"], "refuse", "run", category="refusal", pid="agtr:run= with a 300-char part")


def _predict(t: Table) -> None:
    with t.marked(hardening=True, item=12):
        t.special("predict-edge", "predict:a score that overflows float64", section="predict",
                  category="wrong-result", fixture="hard", case="overflow",
                  correct="exit 0 with each row's label the sign of its exact score (rows 0-3: 1, 0, 1, 1; rows 0 "
                          "and 1 overflow to inf - inf in float64), or exit 2 in one line naming --input; never a "
                          "label read off a NaN score")
        t.add("predict", [OK2, "--input", f"{HARD}/empty.csv"], "refuse", "--input", category="refusal", out_root=False,
              must_say=r"^(?!.*at least [2-9]\d* data rows)", extra={"needs": "hard"}, pid="predict:an empty input",
              correct=f"{ONE_LINE} naming --input, not asking for more rows than the one row it accepts")
        t.add("predict", [OK2, "--input", f"{HARD}/one.csv"], "run", category="valid", out_root=False,
              pid="predict:one row", extra={"needs": "hard", "judge": "predict"},
              correct="exit 0, the predictions CSV on stdout (one row is a table)")
        t.add("predict", [OK2, "--input", "{fx}/pred/t.csv", "--output", "{fx}/afile/p.csv"], "refuse", "--output",
              category="refusal", out_root=False, pid="predict:--output below a regular file",
              must_say=r"^(?!.*\.part\b)(?!.*\.incomplete-)", extra={"needs": "hard"},
              correct=f"{ONE_LINE} naming --output and the path given (not an internal temporary file), no traceback")
        t.add("predict", [OK2, "--input", "{fx}/pred/t.csv", "--output", "/proc/certdp-probe.csv"], "refuse",
              "--output", category="refusal", out_root=False, pid="predict:--output where nothing can be written",
              must_say=r"^(?!.*\.part\b)(?!.*\.incomplete-)", extra={"needs": "hard"},
              correct=f"{ONE_LINE} naming --output and the path given, not an internal temporary file")
        t.special("predict-edge", "predict:--output - writes standard output", section="predict", category="usage",
                  fixture="hard", case="dash",
                  correct="exit 0, the predictions CSV on stdout, no file named '-' in the working folder")
        t.special("predict-edge", "predict:the same bytes in a file and on stdout", section="predict",
                  category="wrong-result", fixture="hard", case="same-bytes",
                  correct="the --output file and stdout hold the same bytes (epsilon written one way)")


def _refusals(t: Table) -> None:
    with t.marked(hardening=True, item=13):
        t.add("agtr", ["staircase.k_min=8", "staircase.k_max=4"], "refuse", ("staircase.k_max", "staircase.k_min"),
              category="unordered-range", pid="agtr:staircase.k_max below staircase.k_min",
              correct=f"{ONE_LINE} naming staircase.k_max or staircase.k_min, with what is allowed")
        t.add("list", ["settings", "resume"], "info", out_root=False, pid="list:settings resume",
              extra={"no_error": True},
              correct="exit 0 with resume's settings (`certdp list` lists resume), never a refusal line with exit 0")
        t.add("figures", ["--list", "no_such_figure", "profile=quick", "out_root={out}/o"], "refuse",
              ("figures", "no_such_figure"), out_root=False, timeout=400, category="unknown-name",
              pid="figures:--list no_such_figure",
              correct=f"{ONE_LINE} naming the unknown figure (as `certdp figures no_such_figure` does)")
        t.add("", [], "info", out_root=False, pid="top:(no arguments), one line or the help with exit 0",
              extra={"one_line_or_help": True},
              correct="exit 0 with the help, or exit 2 with one line: never a 33-line usage error")
        t.special("rerun-deleted-input", "rerun:a finished csv run whose csv was deleted", section="rerun",
                  category="refusal", argv=["agtr", *[a for a in CSV if not a.startswith("dataset.path=")]],
                  correct=f"{ONE_LINE} naming dataset.path; the finished run unchanged")


def _house(t: Table) -> None:
    with t.marked(hardening=True):
        t.special("readme", "house:the README's first commands, as written, in a fresh copy", section="README",
                  category="usage", timeout=600, item=14,
                  correct="each command of the README's first-commands block, run exactly as written by bash in a "
                          "fresh copy of the tree after `make install` (a venv in .venv, nothing activated), starts "
                          "(still running after 60 s, or exit 0); never 'command not found' or a refusal")
        t.special("make-clean", "house:make clean keeps outputs/", section="Makefile", category="data-loss", item=15,
                  correct="`make clean` in a copy of the tree: every file under outputs/ kept byte for byte, "
                          "build artefacts (build/site, .pytest_cache) removed")
        t.special("import", "house:import certdp has no side effects", section="certdp", category="wrong-result",
                  item=16,
                  correct="`import certdp` in a fresh interpreter leaves every signal handler as it was and does not "
                          "call glibc's mallopt (a 64 MiB allocation still comes from mmap, not the heap)")
