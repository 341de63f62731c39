"""The fork server's script (run as a file, not imported: :mod:`tools.prober.forking` copies it
into the fixtures folder and starts it with the probed tree on ``PYTHONPATH``).

It imports certdp (torch, pandas, Hydra: seconds) once, says ``{"ready": true, "vm": bytes}``,
then for every request line ``{"argv", "cwd", "env", "stdout", "stderr", "mem"}`` forks a child
that runs ``certdp.cli.main()`` exactly as ``python -m certdp.cli`` would (same argv,
environment, working folder, umask, memory limit; exit status from SystemExit, tracebacks
printed by the interpreter's rules), answering ``{"pid": n}`` and then ``{"rc": status}``.
"""

import json
import os
import resource
import sys
import traceback

PRELOAD = ("certdp.methods.agtr", "certdp.methods.audit", "certdp.methods.pate", "certdp.methods.feasibility",
           "certdp.methods.ags", "certdp.methods.dpsgd", "certdp.methods.hybrid", "certdp.figures", "pandas",
           "hydra", "sklearn.datasets", "transformers", "peft", "opacus", "sentence_transformers")


def vmsize() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


def child(req: dict, cli) -> None:
    """The forked child: become the probe's process, run the command line, never return."""
    code = 1
    try:
        os.setsid()
        os.chdir(req["cwd"])
        os.umask(0o022)
        if req["mem"]:
            resource.setrlimit(resource.RLIMIT_AS, (req["mem"], req["mem"]))
        os.environ.clear()
        os.environ.update(req["env"])
        fi = os.open(os.devnull, os.O_RDONLY)
        fo = os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        fe = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fi, 0)
        os.dup2(fo, 1)
        os.dup2(fe, 2)
        sys.argv = [cli.__file__] + req["argv"]
        try:
            cli.main()
            code = 0
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:
            traceback.print_exc()
            code = 130
        except BaseException:
            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def main() -> None:
    import certdp.cli
    for m in PRELOAD:
        try:
            __import__(m)
        except Exception:
            pass
    sys.stdout.write(json.dumps({"ready": True, "vm": vmsize()}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            child(req, certdp.cli)
        sys.stdout.write(json.dumps({"pid": pid}) + "\n")
        sys.stdout.flush()
        _, status = os.waitpid(pid, 0)
        sys.stdout.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
