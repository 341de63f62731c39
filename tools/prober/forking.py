"""The fork servers of a pass: one process per worker imports certdp (torch, pandas, Hydra) once,
then forks a child per probe that runs ``certdp.cli.main()`` exactly as ``python -m certdp.cli``
would (the script: :mod:`tools.prober.server`).  Special probes (pairs, signals) always use real
``python -m certdp.cli`` processes."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import threading
from pathlib import Path

from tools.prober.process import Ctx, base_env

SCRIPT = Path(__file__).with_name("server.py")


class ForkServer:
    """One pre-imported certdp process that forks a child per probe (:mod:`tools.prober.server`)."""

    def __init__(self, ctx: Ctx, env: dict):
        self.ctx, self.env, self.proc, self.vm = ctx, env, None, 0

    def start(self):
        script = self.ctx.fx / "fork_server.py"       # run from the fixtures: nothing of tools/ on its path
        if not script.exists():
            shutil.copyfile(SCRIPT, script)
        self.proc = subprocess.Popen([self.ctx.python, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=self.env, cwd=str(self.ctx.fx))
        hello = json.loads(self.proc.stdout.readline() or "{}")
        if not hello.get("ready"):
            raise RuntimeError("the fork server did not start (is --root a certdp tree?)")
        self.vm = int(hello.get("vm", 0))

    def run(self, argv, cwd: Path, env: dict, timeout: float) -> tuple[int | None, str, str, bool]:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        so, se = cwd / "stdout.txt", cwd / "stderr.txt"
        mem = self.vm + self.ctx.mem_bytes if self.ctx.mem_bytes else 0
        req = {"argv": argv, "cwd": str(cwd), "env": env, "stdout": str(so), "stderr": str(se), "mem": mem}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        pid = json.loads(self.proc.stdout.readline())["pid"]
        timed_out = False
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            timed_out = True
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        rc = json.loads(self.proc.stdout.readline())["rc"]
        return rc, so.read_text(errors="replace"), se.read_text(errors="replace"), timed_out

    def close(self):
        if self.proc and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:     # a slow interpreter exit must not lose the pass
                self.proc.kill()
                self.proc.wait()


class Servers:
    """One fork server per worker thread of a pass (started on its first probe), all closed at
    the end of the regular probes."""

    def __init__(self, ctx: Ctx):
        self.ctx, self.local, self.all = ctx, threading.local(), []

    def get(self) -> ForkServer:
        srv = getattr(self.local, "server", None)
        if srv is None:
            srv = ForkServer(self.ctx, base_env(self.ctx, self.ctx.fx))
            self.local.server = srv
            self.all.append(srv)
        return srv

    def close(self) -> None:
        for srv in self.all:
            srv.close()
