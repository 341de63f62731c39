"""The special probes: each a function ``(probe, ctx, folder) -> dict`` (``behaviour``, ``note``,
``named``, ``first``, ``last``, and the ``argv`` and ``rc`` it ran), by the name a probe's
``special`` gives."""

from __future__ import annotations

from tools.prober.specials import audits, house, loaders, resume, runs, surfaces

SPECIALS = {**runs.SPECIALS, **surfaces.SPECIALS, **loaders.SPECIALS, **resume.SPECIALS, **audits.SPECIALS,
            **house.SPECIALS}
