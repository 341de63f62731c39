"""Running certdp for a probe: the probe's context (:class:`Ctx`: the probed tree, the
interpreter, the fixtures, the memory limit), its environment (offline, its own cache, one BLAS
thread), a real ``python -m certdp.cli`` process under an address-space limit, and where a
run's folders and CSVs lie afterwards."""

from __future__ import annotations

import hashlib
import os
import resource
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tools.prober.model import Probe


@dataclass
class Ctx:
    root: Path
    python: str
    fx: Path
    mem_bytes: int
    have: dict
    fork: bool = True


def fill(s: str, ctx: Ctx, out: Path) -> str:
    return s.replace("{fx}", str(ctx.fx)).replace("{out}", str(out)).replace("{repo}", str(ctx.root))


def base_env(ctx: Ctx, out: Path, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CERTDP_", "HYDRA_"))}
    env.update({"PYTHONPATH": str(ctx.root), "CERTDP_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1", "CERTDP_CACHE": str(out / "cache"), "MPLBACKEND": "Agg",
                "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                "PYTHONWARNINGS": "ignore", "TQDM_DISABLE": "1"})
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = fill(v, ctx, out)
    return env


def launch(ctx: Ctx, argv: list, out: Path, env: dict) -> subprocess.Popen:
    mem = ctx.mem_bytes

    def pre():
        os.umask(0o022)
        os.setsid()
        if mem:
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    return subprocess.Popen([ctx.python, "-m", "certdp.cli", *argv], cwd=str(out), env=env, preexec_fn=pre,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")


def finish(p: subprocess.Popen, timeout: float, save: Path | None = None) -> tuple[int | None, str, str, bool]:
    """Wait for ``p`` (killing its process group after ``timeout`` s); stdout and stderr are kept
    in ``save``/stdout.txt and stderr.txt when given."""
    try:
        so, se = p.communicate(timeout=timeout)
        to = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        so, se = p.communicate()
        to = True
    if save is not None:
        n = 0
        while (save / f"stderr{'' if n == 0 else n}.txt").exists():
            n += 1
        (save / f"stdout{'' if n == 0 else n}.txt").write_text(so)
        (save / f"stderr{'' if n == 0 else n}.txt").write_text(se)
    return p.returncode, so, se, to


def argv_of(p: Probe, ctx: Ctx, out: Path) -> list:
    argv = [fill(a, ctx, out) for a in p.argv]
    if p.out_root:
        argv.append(f"out_root={out / 'o'}")
    return argv


def nonempty_lines(s: str) -> list[str]:
    return [line for line in s.splitlines() if line.strip()]


def _final(p: Path) -> bool:
    """Not inside Hydra's .hydra, a staging folder (``.incomplete-``) or a replaced run (``.replaced-``)."""
    return not any(part == ".hydra" or ".incomplete-" in part or ".replaced-" in part for part in p.parts)


def run_dirs(root: Path) -> list[Path]:
    """Run directories under ``root``: folders holding config.yaml, staging folders excluded."""
    return sorted({p.parent for p in root.rglob("config.yaml") if _final(p)})


def csv_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.csv") if _final(p))


def digest(d: Path) -> dict:
    """SHA-256 of every file directly in ``d`` (a run folder's files, a checkpoint's)."""
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(d.glob("*")) if f.is_file()}
