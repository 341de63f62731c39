"""What a probe is and how the catalogue is written down: :class:`Probe` (one invocation and what
it must do), :class:`Table` (the catalogue being built: ids made unique, the settings of each
command merged under the probe's overrides), the behaviours a probe can show and which of the
issue's failure kinds each counts as."""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass, field

from tools.prober.bases import BASE

OK = ("refused-ok", "ran-ok")
BEHAVIOURS = ("refused-ok", "ran-ok", "traceback", "exit0-bad-output", "silent-replacement",
              "wrong-refusal", "wrong-key", "no-allowed-part", "unclean-refusal", "late-refusal", "misleading",
              "data-loss", "privacy-leak", "audit-missed", "signal-mishandled", "audit-violation", "timeout",
              "inconclusive")
# the acceptance: what each failing behaviour counts as
FAILURE_KIND = {"traceback": "tracebacks", "data-loss": "data loss", "exit0-bad-output": "wrong results",
                "silent-replacement": "wrong results", "audit-violation": "wrong results",
                # a private record decides what is published, or whether the run succeeds or what it says
                "privacy-leak": "privacy leaks",
                # an audit passes (exit 0) a planted bug it exists to catch: its verdict is a wrong result
                "audit-missed": "wrong results",
                "wrong-key": "refusals without key/allowed part", "no-allowed-part": "refusals without key/allowed part",
                "unclean-refusal": "unclean or multi-line refusals", "misleading": "misleading messages",
                "wrong-refusal": "valid input refused", "late-refusal": "late refusals",
                "signal-mishandled": "signals mishandled", "timeout": "timeouts", "inconclusive": "inconclusive"}


@dataclass
class Probe:
    """One invocation and what it must do.  ``argv`` follows ``certdp`` (command first) and may
    use ``{fx}`` (fixtures), ``{out}`` (this probe's folder) and ``{repo}`` (the probed tree)."""
    id: str
    argv: list
    expect: str                          # refuse | run | either | usage | info | special
    keys: tuple = ()                     # keys a refusal may name ("*" = any; "x.*" = x.anything)
    section: str = ""                    # worklist group (dotted key)
    category: str = ""                   # the category
    env: dict = field(default_factory=dict)
    timeout: float = 150.0
    out_root: bool = True                # append out_root={out}/o
    runs: int = 1                        # run directories a valid invocation makes (-m sweeps)
    files: tuple | None = None           # CSVs each run directory must hold (default FILES[command])
    must_say: str | None = None          # regex the refusal line must match (else: misleading)
    early: bool = False                  # must refuse before training (log.txt shows no results)
    special: str | None = None           # concurrent | overwrite | signal | figures-signal | rerun
    extra: dict = field(default_factory=dict)


def _key(arg: str) -> str:
    return arg.split("=", 1)[0].lstrip("+~")


def merge(base, extra) -> list:
    """``base`` overrides with the keys set in ``extra`` removed, then ``extra``."""
    keys = {_key(a) for a in extra if "=" in a}
    return [a for a in base if _key(a) not in keys] + list(extra)


def category_of(value: str) -> str:
    v = value.strip().lower()
    if v in ("inf", "-inf", "nan", "+inf") or "inf" in v.split(",") or "nan" in v:
        return "non-finite"
    if v.startswith("[]"):
        return "empty-list"
    if v.startswith("["):
        return "list"
    try:
        f = float(v)
    except ValueError:
        return "non-numeric"
    if f != int(f):
        return "non-integer-or-fraction"
    return "zero-negative-or-range"


class Table:
    def __init__(self):
        self.probes: list[Probe] = []
        self.ids: set[str] = set()

    def add(self, cmd, over, expect, keys=(), *, base=None, section=None, category=None, pid=None, correct=None,
            **kw):
        if correct is not None:                  # what outcome is correct, in words (the new probes say it)
            kw["extra"] = {**kw.get("extra", {}), "correct": correct}
        base = BASE.get(cmd, []) if base is None else base
        # Hydra's -m must come before the overrides (argparse does not take positionals after it)
        flags = [a for a in over if a in ("-m", "--multirun")]
        rest = [a for a in over if a not in flags]
        argv = [cmd] + flags + merge(base, rest) if cmd else list(over)
        if isinstance(keys, str):
            keys = (keys,)
        sect = section or (keys[0] if keys and keys[0] != "*" else (_key(over[0]) if over else cmd))
        val = over[-1].split("=", 1)[1] if over and "=" in over[-1] else ""
        pid = pid or f"{cmd or 'top'}:{' '.join(over)}"
        pid = re.sub(r"\{(\w+)\}/?", "", pid)
        base_id, n = pid, 2
        while pid in self.ids:
            pid, n = f"{base_id}#{n}", n + 1
        self.ids.add(pid)
        self.probes.append(Probe(pid, argv, expect, tuple(keys), sect,
                                 category or (category_of(val) if expect == "refuse" else expect), **kw))

    def refuse(self, cmd, key, values, *, base=None, category=None, **kw):
        for v in values:
            self.add(cmd, [f"{key}={v}"], "refuse", key.lstrip("+"), base=base, category=category, **kw)

    def run(self, cmd, over, **kw):
        self.add(cmd, over, "run", category=kw.pop("category", "valid"), **kw)

    def either(self, cmd, over, keys, **kw):
        self.add(cmd, over, "either", keys, category=kw.pop("category", "ambiguous"), **kw)

    def special(self, kind: str, pid: str, *, section: str, category: str, timeout: float = 240, **extra) -> None:
        """A special probe ``kind`` (a function of :mod:`tools.prober.specials`) with its ``extra``."""
        self.ids.add(pid)
        self.probes.append(Probe(pid, [], "special", (), section, category, special=kind, timeout=timeout,
                                 out_root=False, extra=extra))

    @contextmanager
    def marked(self, **extra):
        """Every probe added inside the block gets ``extra`` (e.g. ``hardening``, ``item``, ``correct``)."""
        n0 = len(self.probes)
        yield self
        for p in self.probes[n0:]:
            for k, v in extra.items():
                p.extra.setdefault(k, v)


STR = ["abc"]
INT_POS = ["abc", "2.7", "0", "-1", "inf", "[3]"]
FLOAT_POS = ["abc", "0", "-1", "inf", "nan", "[1]"]
FLOAT_FIN = ["abc", "inf", "nan", "[1]"]
PROB = ["abc", "0", "1", "-0.1", "1.5", "nan", "[1e-5]"]
