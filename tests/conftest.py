"""Shared test setup: debug interval checks on, outputs and caches in temporary folders."""

import os

os.environ.setdefault("CERTDP_DEBUG", "1")

import logging  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

# absl's logging handler (absl is imported with dp-accounting) closes its stream whenever logging
# is reconfigured, unless that stream is the *current* sys.stderr.  The in-process CLI tests
# redirect sys.stderr while Hydra reconfigures logging, so the handler, created on pytest's
# capture file, would close that file and end the session ("lost sys.stderr").  A handler must
# not close a stream it did not open: keep StreamHandler's close (flush, deregister).
try:
    from absl.logging import PythonHandler as _AbslPythonHandler
except ImportError:          # pragma: no cover - absl comes with dp-accounting
    _AbslPythonHandler = None
if _AbslPythonHandler is not None:
    _AbslPythonHandler.close = logging.StreamHandler.close


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # Keep the user's real cache (datasets fetched once) but never write outputs into the repo.
    monkeypatch.setenv("CERTDP_OUT_TMP", str(tmp_path_factory.mktemp("out")))
    torch.manual_seed(0)
    yield


GOLDEN_DIR = os.path.join(os.path.dirname(__file__), "golden")


@pytest.fixture
def check_golden():
    """Compare an interval (lo, hi) with tests/golden/<name>.json to absolute tolerance
    ``atol``.  A missing golden file fails the test (a deleted reference must not turn into a
    skipped check); ``CERTDP_REGEN_GOLDEN=1`` (re)writes the files, to be reviewed in the diff."""
    import json
    from pathlib import Path

    def check(name: str, lo: torch.Tensor, hi: torch.Tensor, atol: float):
        path = Path(GOLDEN_DIR) / name
        if os.environ.get("CERTDP_REGEN_GOLDEN", "0") not in ("", "0"):
            path.write_text(json.dumps({"lo": lo.tolist(), "hi": hi.tolist()}, indent=1))
        if not path.exists():
            pytest.fail(f"golden file {path} is missing; regenerate it with CERTDP_REGEN_GOLDEN=1 and review the diff")
        ref = json.loads(path.read_text())
        assert torch.allclose(lo, torch.tensor(ref["lo"], dtype=lo.dtype), rtol=0, atol=atol)
        assert torch.allclose(hi, torch.tensor(ref["hi"], dtype=hi.dtype), rtol=0, atol=atol)

    return check
