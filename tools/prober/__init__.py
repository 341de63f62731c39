"""Hostile-input prober for every ``certdp`` command (issue 11's measuring instrument).

Runs several hundred small invocations of ``python -m certdp.cli`` against a source tree
(``--root``, put first on ``PYTHONPATH``) and classifies each outcome automatically:

* valid input (``run``) must exit 0 and leave one complete run directory whose CSVs pandas
  reads, are non-empty, hold no ``nan``/``inf`` text, have their key metrics filled in and in
  range, and whose ``config.yaml`` records the values given on the command line;
* invalid input (``refuse``) must exit 2 with exactly one stderr line
  ``certdp: error: <key>: ...`` naming the expected key, no traceback and no CSV left behind;
* ``either``: refusing (as above) or running correctly are both acceptable;
* ``usage``/``info``: top-level usage errors (exit 2, no traceback) and informational commands
  (exit 0, something printed, no traceback);
* special probes: same-second pairs of identical runs and of sweeps (distinct, complete run
  directories, nothing mixed), reruns into a fixed ``run=`` name (a finished run must never be
  overwritten), SIGTERM/SIGINT of a run and of ``certdp figures`` (exit 143/130, nothing
  half-written, no orphaned child), and ``certdp rerun`` when the tree has it.

Behaviours (the ``got`` column):

  ok:      refused-ok, ran-ok
  failing: traceback, exit0-bad-output, silent-replacement, wrong-refusal, wrong-key,
           unclean-refusal (non-zero exit without the one-line format, or CSVs left behind),
           late-refusal (refused only after training/certifying), misleading (right key, the
           message or the files do not say what happened), data-loss, signal-mishandled,
           audit-violation (a certificate failed its own audit), timeout, inconclusive

Every probe runs in its own folder ``<out>/pass-<time>/<nn>-<id>/`` with ``CERTDP_OFFLINE=1``,
``HF_HUB_OFFLINE=1``, its own ``CERTDP_CACHE``, ``umask 022``, one BLAS thread and an address-space
limit (``--mem-gb`` above the imported modules, default 4 GiB) so that a missing size cap ends in
MemoryError instead of exhausting the machine.  By default each worker keeps one process that has
imported certdp (torch, pandas, Hydra: ~3 s) and forks it per probe, which then runs
``certdp.cli.main()`` with the probe's argv, environment and working folder, exactly what
``python -m certdp.cli`` runs; ``--exec`` starts a fresh interpreter per probe instead.  The
special probes (pairs, signals, reruns) always start real ``python -m certdp.cli`` processes.
Outputs: ``probes.csv`` (one row per probe) in the pass folder and, with ``--worklist FILE``, a
Markdown worklist of the failing probes grouped by section and key.

    python -m tools.prober --root /work/main --snapshot --out /tmp/probe --worklist WORKLIST.md
    python -m tools.prober --root . --only '^feasibility' --jobs 2
    python -m tools.prober --list                       # the probes, without running them
    python -m tools.prober --from-csv /tmp/probe/pass-.../probes.csv --worklist WORKLIST.md

(``python tools/probe.py ...`` is the same command.)  The package, lowest layer first (a module
imports only modules listed before it, :data:`LAYERS`; ``tests/test_prober.py`` checks it):
``bases`` (small settings of every command), ``model`` (:class:`Probe`, :class:`Table`,
behaviours), ``tables`` (csv fixtures the tests share), ``process`` (the probe's environment and
processes), ``checks`` (what a finished run must hold), ``judge``, the fixtures
(``fixtures_surfaces``, ``fixtures_hardening``, ``fixtures``), the ``catalogue/`` (one module a
section), ``server`` and ``forking`` (the fork server), ``plant`` (the audit probes' planted
bugs, a script), ``specials/`` (probes of runs as a whole and of the house), ``runner``,
``report``, ``cli``.

A whole pass (675 probes) took 15 min with --jobs 2 on the shared 2-core machine at load ~15 (6 min of
CPU); ``--exec`` gives the same behaviour and exit code on every probe (checked on 82) at ~6x the time.
"""

# the layers of the package, lowest first: a module imports tools.prober modules of its own layer
# or an earlier one only (tests/test_prober.py)
LAYERS = ("bases", "model", "tables", "process", "checks", "judge",
          "fixtures_surfaces", "fixtures_hardening", "fixtures", "catalogue", "server", "plant", "forking", "specials",
          "runner", "report", "cli", "__main__")
