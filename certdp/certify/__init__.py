"""The certification layer: what every runner does between its settings and its results.

:func:`build_experiment` loads the data and bundles everything a step needs into one
:class:`Experiment` (settings, dataset, model, the engine built once, tensors, batch plan, radii),
refusing before any training what the data makes impossible.  :mod:`.core` trains nominally
(:func:`nominal`), certifies envelopes (:func:`envelopes`, one window or the whole run), and builds
the two staircases: of the clipped prediction per test point (:func:`prediction_staircase`,
AGT-R, PATE, audit) and of the parameter vector (:func:`parameter_staircase`,
:func:`certify_window`, AGS and the hybrid's head), with the global sensitivities they are capped
by; every boundary checks its values finite.  Runners (``certdp.methods``) import this layer and
never each other.  :func:`with_provenance` puts ``scaling`` and ``dp_end_to_end`` on every row a
runner returns (checked before anything is written); :mod:`.released` reads and applies the
models an AGS run released (``released.json``, ``certdp predict``).
"""

from certdp.certify.core import (build_engine, certify_predictions, certify_window, check_prediction_radii, draw_errors,
                                 envelopes,
                                 global_sensitivity, model_envelopes, nominal, parameter_staircase,
                                 prediction_staircase, release_errors, cover_width, trivial_cover)
from certdp.certify.experiment import NO_DATA, Experiment, build_experiment, require_finite, spent, with_provenance

__all__ = ["Experiment", "build_experiment", "require_finite", "with_provenance", "spent", "NO_DATA", "nominal", "envelopes", "certify_predictions",
           "prediction_staircase", "global_sensitivity", "check_prediction_radii", "cover_width",
           "release_errors", "draw_errors", "trivial_cover", "parameter_staircase", "certify_window", "build_engine",
           "model_envelopes"]
