"""The planted bugs of the audit probes (run as a script, not imported:
``python plant.py BUG HITS_FILE ARGV...``).  It patches certdp in this process only -- never the
tree -- then runs ``certdp.cli.main()`` with ``ARGV``, and writes to ``HITS_FILE`` how often the
planted code ran (0: the command never went through it).

* ``publish-half``: the noise of what ``publish/`` holds is halved (in the one function that makes
  every published value, ``certdp.certify.publish.release``; in trees without it, every draw
  from a source of ``certdp.privacy.noise.release_source``);
* ``scale-half``: every mechanism's ``scale()`` is halved;
* ``refuse-above-50``: the one nominal step (``certdp.training.clipped_step``, which nominal
  training and AGT's nominal trajectory take) refuses a batch with a feature above 50 in absolute
  value (a run whose success depends on one record).
"""

import atexit
import sys

BUG, HITS = sys.argv[1], sys.argv[2]
hits = [0]


def _hit() -> None:
    hits[0] += 1


@atexit.register
def _write() -> None:
    with open(HITS, "w") as f:
        f.write(str(hits[0]))


def _each_mechanism(attr: str, wrap) -> None:
    """Wrap ``attr`` on the base mechanism and on every registered one that defines its own."""
    from certdp.privacy import mechanisms
    for cls in {mechanisms.Mechanism, *mechanisms.REGISTRY.values()}:
        if attr in vars(cls):
            setattr(cls, attr, wrap(vars(cls)[attr]))


def plant_publish_half() -> None:
    """Halve the noise of what is published.  Where the tree has one function that makes every
    published value (``certdp.certify.publish.release``: centre + mech.scale(sensitivity) * Z),
    it gets half the sensitivity, so half the noise scale; in an older tree every draw from a
    source of ``certdp.privacy.noise.release_source`` (the published draws) is halved."""
    try:
        from certdp.certify import publish
        original_release = publish.release
    except (ImportError, AttributeError):
        publish = None
    if publish is not None:
        def release(center, sensitivity, *a, **kw):
            _hit()
            return original_release(center, 0.5 * sensitivity, *a, **kw)
        publish.release = release                # before the runners import it by name
        return
    from certdp.privacy import noise
    tagged = []                                  # the published sources (kept alive: ids stay theirs)
    original = noise.release_source

    def release_source(*a, **kw):
        src = original(*a, **kw)
        tagged.append(src)
        return src
    noise.release_source = release_source        # before any runner imports it by name

    def wrap(sample):
        def halved(self, source, *a, **kw):
            z = sample(self, source, *a, **kw)
            if any(source is s for s in tagged):
                _hit()
                return 0.5 * z
            return z
        return halved
    _each_mechanism("sample", wrap)


def plant_scale_half() -> None:
    def wrap(scale):
        def halved(self, *a, **kw):
            _hit()
            return 0.5 * scale(self, *a, **kw)
        return halved
    _each_mechanism("scale", wrap)


def plant_refuse_above_50() -> None:
    import torch

    from certdp import training
    from certdp.errors import ConfigError
    original = training.clipped_step

    def clipped_step(model, theta, x, *a, **kw):
        if torch.as_tensor(x).abs().max() > 50:
            _hit()
            raise ConfigError("dataset", "a training feature above 50 (planted); allowed: features of at most 50")
        return original(model, theta, x, *a, **kw)
    training.clipped_step = clipped_step          # before training's callers import it by name


def main() -> None:
    {"publish-half": plant_publish_half, "scale-half": plant_scale_half,
     "refuse-above-50": plant_refuse_above_50}[BUG]()
    import certdp.cli
    sys.argv = ["certdp", *sys.argv[3:]]
    certdp.cli.main()


if __name__ == "__main__":
    main()
