"""The real code a rate times (:mod:`certdp.estimate.rates`), on synthetic data of the run's
model: ``timer(b, k, steps) -> seconds`` of one pass.  Nothing here reads a record.

While timing, a fresh checkpoint session is the current one (:mod:`certdp.checkpoint`): a loop
the timed code might open never enters the checkpoint of the run that is being estimated, and
no progress record or test signal comes from it.  (The matched DP-SGD baseline is timed by its
step, :func:`certdp.training.clipped_step` after its noise draw: certdp.baselines sits above
the estimate in the import graph.)"""

from __future__ import annotations

import contextlib
import os
import time

import torch

from certdp import checkpoint


def synthetic(spec, n: int, device):
    """(model, x, y): ``n`` records in [-1, 1]^d with labels of the model's loss."""
    from certdp.models import ModelSpec
    g = torch.Generator().manual_seed(0)
    model = ModelSpec(tuple(spec.widths), spec.loss)
    x = torch.rand(n, spec.widths[0], generator=g, dtype=torch.float64) * 2 - 1
    if spec.loss == "ce":
        y = torch.randint(0, spec.widths[-1], (n,), generator=g)
    elif spec.loss == "hinge":
        y = torch.randint(0, 2, (n,), generator=g).to(torch.float64) * 2 - 1
    else:
        y = torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1
    return model, x.to(device), y.to(device)


@contextlib.contextmanager
def no_compile(on: bool):
    """``CERTDP_NO_COMPILE=1`` for the duration (when ``on``), as it was afterwards."""
    old = os.environ.get("CERTDP_NO_COMPILE")
    if on:
        os.environ["CERTDP_NO_COMPILE"] = "1"
    try:
        yield
    finally:
        if on and old is None:
            os.environ.pop("CERTDP_NO_COMPILE", None)
        elif on:
            os.environ["CERTDP_NO_COMPILE"] = old


@contextlib.contextmanager
def apart():
    """A fresh, inert checkpoint session for the duration; the run's own afterwards."""
    own = checkpoint.Session(folder=None, interval_s=None, progress_s=None)
    own.signal_at = None
    with checkpoint.active(own):
        yield


# the accountant's calibration timed: a Poisson-sampled run of this many steps at this rate (the
# DP-SGD grids of the experiments: 16-1,000 steps at 0.1-0.3), uncached, at distinct budgets
ACCOUNTANT_CALL = {"sample_rate": 0.25, "steps": 64, "delta": 1e-5}


def timer_of(spec, device: torch.device):
    """``timer(b, k, steps) -> seconds`` of one pass of the real code for ``spec``: ``b`` records
    a step (a minibatch AGT spec: 4 batches an epoch), ``k`` radii (AGT) or draws (DP-SGD);
    an accountant's: the ``k``-th distinct calibration (at eps = E (1 + k/4), E its option ``epsilon``)."""
    from certdp.agt import AGTOptions, run_agt
    from certdp.bounds import get_certificate
    from certdp.privacy import noise
    from certdp.privacy.dpsgd_core import noise_multiplier
    from certdp.training import TrainSettings, clipped_step, train
    device = torch.device(device)
    engine = get_certificate(spec.engine[0], **dict(spec.engine[1])) if spec.kind == "agt" else None
    data: dict = {}
    cuda = device.type == "cuda"

    def run(b: int, k: int, steps: int) -> None:
        if spec.kind == "accountant":
            E = float(dict(spec.engine[1]).get("epsilon", 1.0))
            noise_multiplier.__wrapped__(epsilon=E * (1.0 + 0.25 * k), accountant=spec.engine[0], **ACCOUNTANT_CALL)
            return
        if data.get("b") != b:
            data.update(b=b, problem=synthetic(spec, 4 * b if spec.minibatch else b, device))
        model, x, y = data["problem"]
        st = TrainSettings(steps=steps, lr=0.01, clip=0.1, batch_size=b if spec.minibatch else None, seed=0)
        theta = model.init(0).to(device)
        if spec.kind == "train":
            train(model, theta, x, y, st, device=device)
        elif spec.kind == "dpsgd":               # certdp.baselines.dpsgd_matched's step: noise, then the step
            gen, theta = torch.Generator().manual_seed(0), theta.expand(k, -1).clone()
            for _ in range(steps):
                theta = clipped_step(model, theta, x, y, st, noise=0.1 * noise.gaussian(gen, theta.shape))
        else:
            with no_compile(spec.compiled is False):
                run_agt(model, theta, (x, y), st, range(1, k + 1),
                        AGTOptions(certificate=engine, progress=False, device=device))

    def timer(b: int, k: int, steps: int) -> float:
        with apart():
            if cuda:
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            run(b, k, steps)
            if cuda:
                torch.cuda.synchronize(device)
            return time.perf_counter() - t0
    return timer
