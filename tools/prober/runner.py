"""Running one probe: skipped when a fixture it needs is missing, a special probe by its
function, a regular one in a fork of the pre-imported server (or a fresh interpreter with
``--exec``), judged; one row of ``probes.csv`` per probe."""

from __future__ import annotations

import json
import shlex
import shutil
import time
from pathlib import Path

from tools.prober.forking import Servers
from tools.prober.judge import judge
from tools.prober.model import Probe
from tools.prober.process import Ctx, argv_of, base_env, finish, launch
from tools.prober.specials import SPECIALS


def run_probe(p: Probe, ctx: Ctx, out: Path, servers: Servers | None = None) -> dict:
    """Run ``p`` in its folder ``out``; its row of ``probes.csv``.  ``servers``: the pass's fork
    servers (None: a fresh ``python -m certdp.cli`` process, as with ``--exec``)."""
    out.mkdir(parents=True, exist_ok=True)
    need = p.extra.get("needs")
    if need and ctx.have.get(need) is not True:
        return row(p, [], {"behaviour": "skipped", "note": str(ctx.have.get(need)), "named": "", "first": "",
                           "last": ""}, None, 0.0)
    if p.special:
        t0 = time.time()
        res = SPECIALS[p.special](p, ctx, out)
        return row(p, res.pop("argv", []), res, res.pop("rc", None), time.time() - t0)
    if "badcache" in json.dumps(p.env):
        shutil.copytree(ctx.fx / "badcache", out / "badcache")
        p = Probe(**{**p.__dict__, "env": {**p.env, "CERTDP_CACHE": str(out / "badcache")}})
    argv = argv_of(p, ctx, out)
    t0 = time.time()
    if ctx.fork and servers is not None:
        rc, so, se, to = servers.get().run(argv, out, base_env(ctx, out, p.env), p.timeout)
    else:
        proc = launch(ctx, argv, out, base_env(ctx, out, p.env))
        rc, so, se, to = finish(proc, p.timeout, out)
    secs = time.time() - t0
    return row(p, argv, judge(p, rc, so, se, to, out, argv, secs, ctx), rc, secs)


def row(p: Probe, argv, res: dict, rc, secs) -> dict:
    return {"id": p.id, "item": p.extra.get("item", ""),
            "command": (p.argv[0] if p.argv else p.special or ""), "section": p.section,
            "category": p.category, "expected": p.expect + (f" {'|'.join(p.keys)}" if p.keys else ""),
            "got": res["behaviour"], "exit": "" if rc is None else rc, "seconds": round(secs, 1),
            "named_key": res.get("named", ""), "stderr_first": res.get("first", ""),
            "stderr_last": res.get("last", ""), "note": res.get("note", ""),
            "args": " ".join(shlex.quote(a) for a in argv)}
