"""Issue 28, items 5-8: no data lost, no wrong result on resume.  Each probe interrupts a small
csv run of its own (SIGTERM after a chosen step, through certdp's test hook
``CERTDP_TEST_SIGTERM_AT_STEP``, with a checkpoint after every step), changes one thing, resumes,
and compares with an uninterrupted run of the same settings (:mod:`tools.prober.specials.resume`)."""

from __future__ import annotations

from tools.prober.model import Table

KEPT = "the checkpoint folder byte for byte as it was, no staging folder left, no run folder made"
SCENARIOS = [  # (scenario, item, what is correct)
    ("moved-input", 5, f"`certdp resume` refused in one line naming dataset.path (the csv is gone); {KEPT}; with the "
                       "csv back the resume writes the uninterrupted run's CSVs"),
    ("semicolon", 5, f"`certdp resume` refused in one line naming dataset.path (the csv re-saved with ';'); {KEPT}; "
                     "with the csv back the resume writes the uninterrupted run's CSVs"),
    ("changed-value", 6, f"`certdp resume` and the same command with resume=true both refused in one line naming "
                         f"dataset.path (one value changed since the checkpoint); {KEPT}; with the old csv back the "
                         "resume writes the uninterrupted run's CSVs"),
    ("copied-state", 7, "`certdp resume` refused in one line (state.pt copied from another checkpoint); both "
                        "checkpoints byte for byte as they were, no staging folder, no traceback"),
    ("same-name", 7, "two runs with the same run=X (seeds 1 and 2) started together and both interrupted leave a "
                     "checkpoint of one run (its settings and its own state): `certdp resume X` writes the "
                     "uninterrupted CSVs of the seed its config.yaml records, or refuses in one line"),
    ("moved-loose", 7, "a .resumable folder moved out of any <out_root>/<command>/<dataset>/: `certdp resume` of it "
                       "refused in one line, the checkpoint as it was, nothing started anywhere"),
    ("moved-layout", 7, "a .resumable folder moved below another <out_root>/agtr/csv/: `certdp resume` of it "
                        "continues it (its log says resumed) and lands beside it with the uninterrupted run's CSVs"),
    ("taken-final", 8, "a finished run in the interrupted run's folder: `certdp resume` refused in one line that "
                       "suggests a command; that command, run as written, writes the uninterrupted run's CSVs"),
    ("rerun-resumable", 8, "`certdp rerun` of a .resumable folder and of its run's path: refused in one line that "
                           "points to `certdp resume`; the checkpoint as it was"),
    ("sweep-message", 8, "a sweep cut in its second job: the message gives a command; that command, run as "
                         "written, finishes the whole sweep in its folder (both jobs' results)"),
    ("step-named", 8, "the interruption line says which step the kept checkpoint holds ('saved at <loop> step S of "
                      "T'; the grace-ran-out branch is tests/test_resume.py's: a probe cannot make a step outlast "
                      "the 20 s grace)"),
]


def add(t: Table) -> None:
    for name, item, correct in SCENARIOS:
        with t.marked(hardening=True, item=item, correct=correct):
            t.special("resume", f"resume:{name}", section="resume", category="data-loss", timeout=400,
                      scenario=name)
