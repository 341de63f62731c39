"""``python -m tools.prober``: the prober's command line (:mod:`tools.prober.cli`)."""

from tools.prober.cli import main

main()
