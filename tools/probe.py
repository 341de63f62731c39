"""``python tools/probe.py ...``: the same command as ``python -m tools.prober ...`` (the
hostile-input prober, :mod:`tools.prober`), for a shell whose working folder is anywhere."""

import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path[0] = str(Path(__file__).resolve().parent.parent)     # the repository, not tools/, first
    from tools.prober.cli import main
    main()
