"""The docs are reference, not a notebook: a page that quotes a measurement names the benchmark
output under ``benchmarks/results/`` that holds it, and no page carries an issue number.

What counts as a quoted measurement (:data:`MEASUREMENT`), in a page's prose (code blocks and
inline code are commands, settings and sample output, not quotes):

* a time: a number with a unit of time (``322 s``, ``1.5 h``, ``1 h 41 min``, ``13 min 32 s``);
* a rate: a number per second (``26.2 GFLOP/s``, ``3 steps/s``) or a speed-up (``7.6x faster``);
* a load: ``load 14``, ``load average 11.7``;
* a test count: ``792 tests``.

These are the numbers that go stale: they depend on the machine, its load and the commit, and
the docs disagreed on them.  A number that is a rule, not a measurement, stays: one preceded by a
bound (``within 90 s``, ``at most 20 s``, ``beyond 10 minutes``, ``every 60 s``, a default) is a
limit the code or the project sets (:data:`BOUND`).  Percentages, counts of records and
accuracies are not matched: they are properties of data and settings, checked by the tests of
the code that computes them.

A quote passes when its paragraph names a file under ``benchmarks/results/`` (``benchmarks/
results/roofline_after.md``, as inline code: the site does not serve that folder) that holds the
number, to the precision quoted.  :data:`PENDING` lists the quotes of pages other engineers are
rewriting whose outputs are not yet under benchmarks/results/: it may only shrink (an entry no
page quotes any more fails too).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"

NUM = r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d])|(?<![\w.,])\d+(?:\.\d+)?(?![\d])"
_N = rf"(?:{NUM})"
TIME_UNIT = r"(?:ms|µs|us|s|sec|secs|seconds?|min|mins|minutes?|h|hrs?|hours?|days?)"
MEASUREMENT = re.compile(
    rf"(?P<time>{_N}\s?{TIME_UNIT}\b(?:\s{_N}\s?{TIME_UNIT}\b)?)"
    rf"|(?P<rate>{_N}\s?(?:[A-Za-z]+)?/s\b)"
    rf"|(?P<speedup>{_N}\s?[x×]\s(?:faster|slower|speed-?up))"
    rf"|(?P<load>\bload(?:\s+average)?(?:\s+of)?\s+(?:about\s+|~)?{_N})"
    rf"|(?P<tests>{_N}\s+tests\b)")
# words just before a number that make it a limit, not a measurement
BOUND = re.compile(r"(?:within|at most|under|below|up to|limit(?:ed)? (?:of|to)|timeout(?: of)?|after|every|"
                   r"default(?:s? (?:to|of))?|more than|longer than|beyond|exceeds?|over|less than|budget of|"
                   r"grace of|=|≤|<=|<|>|>=|≥|about every|once per|per|each)\s*(?:about\s+|~)?$", re.IGNORECASE)
ISSUE = re.compile(r"\bissues?\s+#?\d+|\(#\d+\)|\bissue #\d+", re.IGNORECASE)
RESULT_REF = re.compile(r"benchmarks/results/([\w.\-]+)")

# page -> quotes (as matched) whose benchmark output is not under benchmarks/results/ yet: the
# measurement sections of the pages perf2 (frontier.md, performance-and-devices.md's acceptance
# run) and imdb (datasets.md, performance-and-devices.md's text embeddings) are rewriting.
PENDING: dict[str, list[str]] = {
    'datasets.md': [
        '15 minutes', '7 hours', '8x faster', '14.6 min', '7.0 reviews/s', '46 reviews/s', '7 reviews/s',
        '83 s', '50 s', '3.3 h', '42 min', '15.9 h', 'load 11', '29 min', '7 h', 'load about 10', '0.46 s',
        '46 min', '77 min', '66 min', '11 min', '1 min', '6 min', '50 min', '30 minutes',
    ],
    'frontier.md': [
        'load 9',
    ],
    'performance-and-devices.md': [
        '2.4 s', '6.1 s', '20 s', '30 minutes', '12 s', 'load 11', '18.9 GFLOP/s', '26.2 GFLOP/s',
        '7.6x faster', '31 GFLOP/s', 'load 13', '38.6 s', '40.1 s', '31.7 s', '33.6 s', 'load 1.4', '35.8 s',
        '26.9 s', 'load 1.5', '3.12 s', '2.35 s', 'load 1.2', '17.5 s', '17.9 s', '12.7 s', '13.6 s',
        'load 1.3', 'load 2.4', '71.7 s', '18.7 s', '100.9 s', '34.7 s', '44 min', '8 s', '322 s', 'load ~2',
        '11.64 s', '10.30 s', 'load 7', '0.81 s', '0.29 s', '57.9 s', '16 h', 'load 3', '15 minutes',
        '12.1 s', '3.4 h', '471 s', '2.99 s', '2.97 s', '0.056 s', '53x faster', '4 minutes',
    ],
}


def pages() -> list[Path]:
    return sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]


def prose_paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of every paragraph, code blocks dropped and inline code blanked
    except for the results files it names."""
    out, para, start, fenced = [], [], 0, False
    for i, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    ") and (not para or para[-1] == ""):
            if para:
                out.append((start, " ".join(para)))
                para = []
            continue
        if not line.strip():
            if para:
                out.append((start, " ".join(para)))
                para = []
            continue
        if not para:
            start = i
        para.append(line.strip())
    if para:
        out.append((start, " ".join(para)))

    def blank(m: re.Match) -> str:
        refs = " ".join(RESULT_REF.findall(m.group(0)))
        return f" {' '.join('benchmarks/results/' + r for r in refs.split())} " if refs else " "
    return [(n, re.sub(r"`[^`]*`", blank, p)) for n, p in out]


def quotes(text: str) -> list[tuple[int, str, str, list[str]]]:
    """(line, kind, quote, results files named in its paragraph) of every measurement quoted."""
    found = []
    for line, para in prose_paragraphs(text):
        refs = RESULT_REF.findall(para)
        for m in MEASUREMENT.finditer(para):
            if m.lastgroup not in ("load", "tests") and BOUND.search(para[max(0, m.start() - 30):m.start()]):
                continue
            found.append((line, m.lastgroup, m.group(0), refs))
    return found


def numbers(s: str) -> list[str]:
    return [n.replace(",", "") for n in re.findall(NUM, s)]


def held(value: str, text: str) -> bool:
    """Some number of ``text`` rounds to ``value`` at the precision ``value`` is written with."""
    places = len(value.split(".")[1]) if "." in value else 0
    want = float(value)
    for n in numbers(text):
        got = float(n)
        if math.isclose(round(got, places), want, rel_tol=0, abs_tol=10 ** -places / 2 + 1e-12):
            return True
    return False


def unbacked(text: str, results: dict[str, str]) -> list[str]:
    bad = []
    for line, kind, quote, refs in quotes(text):
        vals = numbers(quote)
        if refs and all(any(held(v, results.get(r, "")) for r in refs) for v in vals):
            continue
        bad.append(f"line {line}: {kind} {quote!r}" + ("" if refs else " (its paragraph names no benchmarks/results/ file)"))
    return bad


def results_texts() -> dict[str, str]:
    return {p.name: p.read_text(errors="replace") for p in RESULTS.iterdir() if p.is_file()}


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_every_quoted_measurement_is_held_by_the_benchmark_output_it_names(page):
    text = page.read_text()
    pending = PENDING.get(page.name, [])
    bad = [b for b in unbacked(text, results_texts()) if not any(repr(q) in b for q in pending)]
    assert not bad, f"{page.name} quotes measurements no benchmarks/results/ output holds:\n" + "\n".join(bad)


def test_the_pending_list_only_shrinks():
    for name, qs in PENDING.items():
        text = (REPO / "docs" / name).read_text() if name != "README.md" else (REPO / name).read_text()
        quoted = {q for _, _, q, _ in quotes(text)}
        assert not set(qs) - quoted, f"{name}: no longer quoted, drop from PENDING: {sorted(set(qs) - quoted)}"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_no_page_carries_an_issue_number(page):
    hits = [f"line {i}: {line.strip()[:100]}" for i, line in enumerate(page.read_text().splitlines(), 1)
            if ISSUE.search(line)]
    assert not hits, f"{page.name}: issue numbers belong to the tracker, not the reference:\n" + "\n".join(hits)


# ---- the check has teeth ------------------------------------------------------------------------
RESULTS_DEMO = {"roofline_after.md": "| mnist5 | ibp-tau | 3.215 | 0.3827 | load 12.5 |\nfloat64 matmul: 26.2 GFLOP/s"}


@pytest.mark.parametrize("page", [
    "One AGT step of mnist5 takes 3.2 s on the CPU.",                                  # names no output
    "One AGT step of mnist5 takes 4.1 s (`benchmarks/results/roofline_after.md`).",    # a planted number
    "The fast tier runs 873 tests.",
    "It was measured at load 14.",
    "The matmul runs at 31.0 GFLOP/s (`benchmarks/results/roofline_after.md`).",
    "California took 1 h 41 min.",
    "The blocked path is 7.6x faster.",
])
def test_a_planted_measurement_fails(page):
    assert unbacked(page, RESULTS_DEMO)


@pytest.mark.parametrize("page", [
    "One AGT step of mnist5 takes 3.2 s on the CPU (`benchmarks/results/roofline_after.md`).",
    "The float64 matmul reaches 26.2 GFLOP/s here (`benchmarks/results/roofline_after.md`).",
    "A signal is held for at most 20 s; a run saves a checkpoint every 5 min; beyond 10 minutes it says so.",
    "The fast tier stays within about 90 s.",
    "    AGT[ibp] estimate: 57.9 s per step: about 16.1 h in all",                   # sample output
    "Run `certdp agtr certificate.time_limit=60s` for a budget.",
])
def test_a_backed_quote_a_bound_or_code_passes(page):
    assert not unbacked(page, RESULTS_DEMO)


def test_an_issue_number_is_found():
    assert ISSUE.search("as issue 28 asked") and ISSUE.search("(issue #32)") and not ISSUE.search("an issue of the data")
