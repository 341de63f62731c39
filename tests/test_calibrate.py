"""The one calibration search (certdp/privacy/calibrate.py) against closed forms."""

import math

from certdp.privacy.calibrate import bisect, largest


def test_bisect_brackets_a_known_threshold():
    lo, hi = bisect(lambda v: v * v < 2.0, 0.0, 2.0, iters=60)
    assert lo * lo < 2.0 <= hi * hi and hi - lo <= 4e-16                  # 60 halvings: down to the float spacing
    # an early stop by relative width, after at least one halving
    lo, hi = bisect(lambda v: math.exp(v) < 10.0, 0.0, 8.0, iters=None, close=lambda a, b: b - a <= 1e-3 * b)
    assert lo < math.log(10.0) <= hi and hi - lo <= 1e-3 * hi
    lo, hi = bisect(lambda v: v < 1.0, 0.0, 1e-20, iters=5, close=lambda a, b: True)
    assert (lo, hi) == (5e-21, 1e-20)                # one halving happens before the check


def test_largest_returns_a_point_that_satisfies_and_zero_when_none_does():
    v = largest(lambda e: 3 * e <= 1.0, 0.0, 1.0)
    assert 3 * v <= 1.0 and 1.0 / 3 - v < 1e-15
    assert largest(lambda e: False, 0.0, 1.0) == 0.0
