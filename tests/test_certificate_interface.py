"""The certificate interface: a certificate added from outside the package (one subclass,
registered here) runs through AGT and `certdp certify`; queries that share boxes agree with the
one-box-per-radius pairing and contain every step they promise; the shared aggregation agrees
with sorting; missing hooks, unknown options and unsupported models fail with errors naming them."""

import pytest
import torch
import yaml
from pathlib import Path

from certdp.agt import AGTOptions, run_agt
from certdp.bounds import CERTIFICATES, check_supported, get_certificate, register
from certdp.bounds.aggregate import batch_sum, top_sum
from certdp.bounds.base import WORKSPACE, Batch, Certificate
from certdp.bounds.ibp import gradient_bounds
from certdp.bounds.interval import Interval
from certdp.bounds.shared import SharedBoxes
from certdp.errors import ConfigError
from certdp.methods.audit import neighbours
from certdp.models import ModelSpec
from certdp.training import TrainSettings, batch_plan, train

D = torch.float64
CONF = Path(__file__).resolve().parent.parent / "configs"


class BoxCertificate(Certificate):
    """Every clipped gradient coordinate lies in [-clip, clip], whatever the parameters."""

    name = "box"

    def per_sample_gradient_bounds(self, model, theta, x, y, *, clip, out=None):
        shape = (theta.lo.shape[0], model.n_params, x.shape[0])
        return Interval(torch.full(shape, -clip, dtype=theta.lo.dtype), torch.full(shape, clip, dtype=theta.lo.dtype))


@pytest.fixture
def box_registered():
    register(BoxCertificate)
    yield
    CERTIFICATES.pop("box", None)


def _regression(n=30, d=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, d, generator=g, dtype=D) * 2 - 1
    return x, x.sum(1) + 0.1 * torch.randn(n, generator=g, dtype=D)


def test_box_certificate_from_a_test_runs_agt_and_contains_neighbours(box_registered):
    m = ModelSpec((2, 1), "mse")
    x, y = _regression()
    st = TrainSettings(steps=10, lr=0.3, clip=0.2, batch_size=6, contraction=0.9, seed=1)
    plan = batch_plan(len(y), st)
    ks = [1, 2, 4]
    th0 = m.init(0)
    env = run_agt(m, th0, (x, y), st, ks, AGTOptions(certificate=get_certificate("box"), plan=plan, progress=False))
    # closed form: every step adds lr * 2 gamma to each width and contracts the old one by lam
    width = sum(st.contraction ** (st.steps - 1 - t) * 2 * st.lr * st.clip for t in range(st.steps))
    assert torch.allclose(env.widths(), torch.full_like(env.lo, width), rtol=1e-9)
    ibp = run_agt(m, th0, (x, y), st, ks, AGTOptions(certificate=get_certificate("ibp"), plan=plan, progress=False))
    assert bool((ibp.widths() <= env.widths() + 1e-12).all())
    for j, k in enumerate(ks):
        for mode in ("random", "adversarial"):
            X, Y = neighbours(mode, k, 30, x, y, plan, "mse", 1, torch.Generator().manual_seed(k))
            th = train(m, th0.expand(30, -1), X, Y, st, plan=plan)
            assert bool(env.contains(th, tol=1e-10)[:, j].all()), (mode, k)


def test_box_certificate_through_certdp_certify(box_registered, tmp_path):
    from certdp.methods.agtr import run_certify
    from certdp.settings import parse
    ds = yaml.safe_load((CONF / "dataset" / "linear.yaml").read_text()) | {"n_train": 40, "n_test": 20}
    cfg = {"seed": 0, "dataset": ds, "model": {"arch": "auto"},
           "train": {"steps": 4, "lr": 0.1, "clip": 0.1, "batch_size": 8, "seed": 0},
           "certificate": {"name": "box", "aggregation": "topk"},          # another engine's option: dropped
           "staircase": {"kind": "range", "k_min": 1, "k_max": 4, "include_n": True},
           "privacy": yaml.safe_load((CONF / "privacy" / "default.yaml").read_text())}
    out = run_certify(parse("certify", cfg), progress=False)
    env = out["envelopes"]
    assert list(env.k) == [1, 2, 3, 4, 40]
    assert (env.width_max - 4 * 0.1 * 2 * 0.1).abs().max() < 1e-10      # the box: 2 lr gamma per step
    assert (out["certificate"].certificate == "box").all()


def _head(widths, loss, n, seed):
    m = ModelSpec(widths, loss)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, widths[0], generator=g, dtype=D)
    if loss == "mse":
        y = torch.randn(n, generator=g, dtype=D)
    elif loss == "hinge":
        y = (torch.rand(n, generator=g) < 0.5).to(D) * 2 - 1
    else:
        y = torch.randint(0, widths[-1], (n,), generator=g)
    return m, x, y


ENGINES = [("ibp", {}), ("ibp", {"aggregation": "tau"}), ("crown", {})]
# the softmax heads take ~10x the others (measured): they run in the slow tier, the rest in `make test`
MODELS = [((2, 1), "mse"), ((3, 1), "hinge"), pytest.param((3, 3), "ce", marks=pytest.mark.slow), ((2, 5, 1), "mse"),
          pytest.param((3, 4, 2), "ce", marks=pytest.mark.slow)]


def _queries(m, seed):
    g = torch.Generator().manual_seed(seed)
    c = m.init(seed)
    rad = torch.stack([torch.full_like(c, r) for r in (0.003, 0.05, 0.3)])
    boxes = Interval(c - rad, c + rad)
    src = torch.tensor([0, 0, 1, 2, 2, 1, 0, 2])
    subs = torch.tensor([0, 1, 2, 1, 5, 3, 12, 0])
    return boxes, src, subs, g


@pytest.mark.slow
@pytest.mark.parametrize("name,opts", ENGINES, ids=["ibp", "ibp-tau", "crown"])
@pytest.mark.parametrize("widths,loss", MODELS)
def test_shared_box_queries_match_the_pairing_and_are_sound(name, opts, widths, loss):
    m, x, y = _head(widths, loss, 10, 1)
    cert = get_certificate(name, **opts)
    st = TrainSettings(steps=1, lr=0.4, clip=0.3, contraction=0.8)
    boxes, src, subs, g = _queries(m, 2)
    q = cert.step_bounds(m, boxes, Batch(x, y), subs=subs, src=src, settings=st)
    paired = cert.step_bounds(m, boxes[src], Batch(x, y), subs=subs, settings=st)
    assert q.lo.shape == (len(src), m.n_params)
    assert torch.allclose(q.lo, paired.lo, rtol=1e-12, atol=1e-14)
    assert torch.allclose(q.hi, paired.hi, rtol=1e-12, atol=1e-14)
    # containment: parameters in box src[q], at most subs[q] clipped gradients replaced by anything
    n = x.shape[0]
    for j in range(len(src)):
        lo, hi = boxes.lo[src[j]], boxes.hi[src[j]]
        for it in range(40):
            u = torch.rand(lo.shape, generator=g, dtype=D)
            th = torch.where(u < 0.5, lo, hi) if it % 2 else lo + u * (hi - lo)
            gr = m.per_sample_grads(th, x, y).clamp(-st.clip, st.clip)
            k = int(torch.randint(0, min(int(subs[j]), n) + 1, (1,), generator=g))
            sub = torch.randperm(n, generator=g)[:k]
            gr[sub] = (torch.rand(k, m.n_params, generator=g, dtype=D) * 2 - 1) * st.clip
            new = st.contraction * th - st.lr * gr.mean(0)
            assert bool(((new >= q.lo[j] - 1e-12) & (new <= q.hi[j] + 1e-12)).all()), (j, k)


def test_shared_boxes_wrapper_takes_explicit_queries():
    m, x, y = _head((3, 1), "hinge", 10, 3)
    st = TrainSettings(steps=1, lr=0.4, clip=0.3)
    boxes, src, subs, _ = _queries(m, 4)
    ibp = get_certificate("ibp")
    shared = SharedBoxes(ibp, 2.0, topk_cap=2).step_bounds(m, boxes, Batch(x, y), subs=subs, src=src, settings=st)
    direct = ibp.step_bounds(m, boxes, Batch(x, y), subs=subs, src=src, settings=st)
    small = subs < x.shape[0]
    # the cap only loosens: never tighter than the exact top-k, equal where k <= cap
    assert bool((shared.lo[small] <= direct.lo[small] + 1e-12).all() and (shared.hi[small] >= direct.hi[small] - 1e-12).all())
    exact = subs <= 2
    assert torch.allclose(shared.lo[exact], direct.lo[exact], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dim", [-1, 1])
def test_top_sum_agrees_with_sorting(dim):
    g = torch.Generator().manual_seed(0)
    v = torch.randn(3, 7, 5, generator=g, dtype=D)                 # boxes, then the summed axis (dim)
    src = torch.tensor([2, 0, 0, 1, 2])
    subs = torch.tensor([0, 3, 1, 5, 7]) if dim == 1 else torch.tensor([0, 3, 1, 5, 2])
    for largest in (True, False):
        got = top_sum(v, subs, src, largest=largest, dim=dim)
        srt = v.sort(dim=dim, descending=largest).values
        for q in range(len(src)):
            ref = srt[src[q]].narrow(dim % 3 - 1, 0, int(subs[q])).sum(dim % 3 - 1)
            assert torch.allclose(got[q], ref, atol=1e-12)
        capped = top_sum(v, subs, src, largest=largest, dim=dim, cap=2)
        sign = 1 if largest else -1
        assert bool((sign * (capped - got) >= -1e-12).all())           # sound over-estimate of the removed mass
        assert torch.allclose(capped[subs <= 2], got[subs <= 2])


def test_zero_substitutions_contain_the_nominal_step_only():
    m, x, y = _head((2, 1), "mse", 8, 5)
    th = m.init(1)
    sums = batch_sum(gradient_bounds(m, Interval(th[None], th[None]), x, y, clip=0.5), subs=torch.tensor([0]), clip=0.5)
    ref = m.per_sample_grads(th, x, y).clamp(-0.5, 0.5).sum(0)
    assert torch.allclose(sums.lo[0], ref, atol=1e-12) and torch.allclose(sums.hi[0], ref, atol=1e-12)


def test_gradient_bounds_are_owned_by_the_caller():
    m, x, y = _head((2, 4, 1), "mse", 6, 0)
    c = m.init(0)
    a = gradient_bounds(m, Interval(c[None] - 0.01, c[None] + 0.01), x, y, clip=1.0)
    keep = a.lo.clone()
    gradient_bounds(m, Interval(c[None] - 0.5, c[None] + 0.5), x, y, clip=1.0)
    assert torch.equal(a.lo, keep)


def test_missing_hooks_are_named():
    with pytest.raises(TypeError, match="per_sample_gradient_bounds"):
        class Nothing(Certificate):
            name = "nothing"

    class StepOnly(Certificate):
        name = "steponly"

        def step_bounds(self, model, boxes, batch, *, subs, src=None, settings):
            return boxes

    with pytest.raises(NotImplementedError, match="per_sample_gradient_bounds"):
        StepOnly().batch_sum_bounds(ModelSpec((1, 1)), Interval(torch.zeros(1, 2), torch.zeros(1, 2)),
                                    Batch(torch.zeros(3, 1, dtype=D), torch.zeros(3, dtype=D)), subs=torch.tensor([1]), clip=1.0)

    class Windowed(StepOnly):
        name = "windowed"
        window_steps = 2

    m, x, y = _head((2, 1), "mse", 6, 0)
    with pytest.raises(NotImplementedError, match="window_bounds"):
        run_agt(m, m.init(0), (x, y), TrainSettings(steps=2, lr=0.1, clip=0.1), [1],
                AGTOptions(certificate=Windowed(), progress=False))
    with pytest.raises(TypeError):
        register(object)


def test_options_and_support_fail_with_the_key():
    with pytest.raises(ConfigError) as e:
        get_certificate("ibp", aggregation="median")
    assert e.value.key == "certificate.aggregation"
    with pytest.raises(ConfigError) as e:
        get_certificate("crown", frequncy=4)
    assert e.value.key == "certificate.frequncy" and "allowed: substitutions" in e.value.message
    with pytest.raises(ConfigError) as e:
        get_certificate("zonotope")
    assert e.value.key == "certificate.name" and "ibp" in e.value.message
    with pytest.raises(ConfigError) as e:         # milp's option given to ibp: refused, not dropped
        get_certificate("ibp", frequency=4)
    assert e.value.key == "certificate.frequency" and "allowed: aggregation, substitutions" in e.value.message
    with pytest.raises(ConfigError) as e:
        check_supported(get_certificate("milp"), ModelSpec((2, 4, 1), "mse"))
    assert e.value.key == "certificate.name" and "crown, ibp" in e.value.message
    check_supported(get_certificate("milp"), ModelSpec((2, 1), "hinge"))


def test_no_getattr_probe_of_a_certificate():
    """Hooks are declared on Certificate (bounds/base.py), never probed: no ``getattr`` /
    ``hasattr`` on a certificate (a name containing ``cert`` or ``engine``) in the package."""
    import ast
    from pathlib import Path

    import certdp
    from certdp.bounds.base import Certificate

    probes = []
    for path in Path(certdp.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and node.args
                    and any(w in ast.unparse(node.args[0]).lower() for w in ("cert", "engine"))):
                probes.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    assert probes == []
    for hook in ("substitutions", "schedule", "window_steps", "nesting_monotone", "ledger_slack"):
        assert hook in vars(Certificate), hook


def test_workspace_buffers_grow_and_are_views():
    a = WORKSPACE.get("test.workspace", (3, 4), torch.float64, "cpu")
    a.fill_(1.0)
    b = WORKSPACE.get("test.workspace", (5, 6), torch.float64, "cpu")                       # grows: a new buffer
    b.fill_(2.0)
    c = WORKSPACE.get("test.workspace", (2, 2), torch.float64, "cpu")
    assert c.shape == (2, 2) and c.data_ptr() == b.data_ptr() and bool((a == 1.0).all())
