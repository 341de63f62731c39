"""Shared test setup: debug interval checks on, a fixed global torch seed, golden-file checks."""

import os

os.environ.setdefault("CERTDP_DEBUG", "1")

import sys  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

# absl (imported by dp-accounting) creates a logging handler bound to the sys.stderr of the moment,
# here pytest's capture stream.  An in-process CLI run (tests/test_settings.py) lets Hydra call
# logging.config.dictConfig, which closes every live handler; absl's close() closes its stream
# unless it is the *current* sys.stderr, which during the run is the test's StringIO -- so pytest's
# own capture file was closed and the session died at its next report ("lost sys.stderr").  Bind
# absl's handler to the interpreter's stderr, which absl never closes.
try:
    from absl import logging as _absl_logging
except ImportError:  # absl comes with dp-accounting; without it there is nothing to guard
    _absl_logging = None
if _absl_logging is not None:
    _absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__


@pytest.fixture(autouse=True)
def _seeded():
    # Every test starts from the same global torch seed (tests that draw without a generator).
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
