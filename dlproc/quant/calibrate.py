"""Activation range estimation: min-max, percentile and entropy (KL divergence) calibration.

The quantizer streams the calibration data through the float network batch by batch and feeds
every layer's output to a :class:`RangeCollector`. Min-max needs one pass. Percentile and entropy
need the distribution, which would not fit in memory for a large network, so they make a second
pass that fills a histogram per tensor over the range found in the first:

* **percentile** (``p``, default 99.99): a histogram of the signed values with
  :data:`PERCENTILE_BINS` bins over [min, max]; the range is the (100 - p)-th and p-th
  percentiles, linearly interpolated inside a bin, so it is exact to one bin width.
* **entropy** (as TensorRT's entropy calibrator): a 2048-bin histogram of ``|x|`` over
  [0, max|x|]; for every candidate threshold bin i in 128..2048 the reference distribution P is
  bins 0..i-1 with all counts beyond folded into bin i-1, and Q is the same bins merged into 128
  levels and expanded back (each level's count spread evenly over the bins of it that were
  non-empty). The threshold is the upper edge of the bin i that minimises KL(P || Q); the range
  is [-T, T] intersected with [min, max] (so a non-negative tensor gets [0, T]).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "METHODS",
    "PERCENTILE_BINS",
    "ENTROPY_BINS",
    "ENTROPY_LEVELS",
    "RangeCollector",
    "entropy_threshold",
    "histogram_percentile",
]

METHODS = ("minmax", "percentile", "entropy")
PERCENTILE_BINS = 1 << 14
ENTROPY_BINS = 2048
ENTROPY_LEVELS = 128


class RangeCollector:
    """Accumulates the range (and in pass two the histogram) of one tensor."""

    def __init__(self) -> None:
        self.lo = np.inf
        self.hi = -np.inf
        self.hist: np.ndarray | None = None
        self.edges: tuple[float, float] | None = None

    # pass one
    def update_minmax(self, x: np.ndarray) -> None:
        self.lo = min(self.lo, float(x.min()))
        self.hi = max(self.hi, float(x.max()))

    # pass two
    def start_histogram(self, method: str) -> None:
        if method == "percentile":
            self.edges = (self.lo, self.hi)
            self.hist = np.zeros(PERCENTILE_BINS, dtype=np.int64)
        else:
            self.edges = (0.0, max(abs(self.lo), abs(self.hi)))
            self.hist = np.zeros(ENTROPY_BINS, dtype=np.int64)

    def update_histogram(self, x: np.ndarray, method: str) -> None:
        assert self.hist is not None and self.edges is not None
        lo, hi = self.edges
        v = x.ravel().astype(np.float64)
        if method == "entropy":
            v = np.abs(v)
        if hi <= lo:  # a constant tensor: every value in the first bin
            self.hist[0] += v.size
            return
        idx = np.floor((v - lo) / (hi - lo) * self.hist.size).astype(np.int64)
        np.clip(idx, 0, self.hist.size - 1, out=idx)
        self.hist += np.bincount(idx, minlength=self.hist.size)

    def result(self, method: str, percentile: float) -> tuple[float, float]:
        """The calibrated (min, max) of the tensor."""
        if method == "minmax":
            return self.lo, self.hi
        assert self.hist is not None and self.edges is not None
        lo, hi = self.edges
        if method == "percentile":
            if hi <= lo:
                return self.lo, self.hi
            low = histogram_percentile(self.hist, lo, hi, 100.0 - percentile)
            high = histogram_percentile(self.hist, lo, hi, percentile)
            return max(self.lo, low), min(self.hi, high)
        threshold = entropy_threshold(self.hist, hi) if hi > 0 else 0.0
        return max(self.lo, -threshold), min(self.hi, threshold)


def histogram_percentile(hist: np.ndarray, lo: float, hi: float, p: float) -> float:
    """The p-th percentile (0..100) of the values a histogram over [lo, hi] counts.

    Within the bin where the cumulative count crosses p percent, values are taken as spread
    evenly, so the answer is within one bin width of the exact percentile.
    """
    total = int(hist.sum())
    target = total * p / 100.0
    cum = np.cumsum(hist)
    i = int(np.searchsorted(cum, target, side="left"))
    i = min(i, hist.size - 1)
    before = cum[i - 1] if i > 0 else 0
    inside = hist[i]
    frac = (target - before) / inside if inside else 0.0
    width = (hi - lo) / hist.size
    return float(lo + (i + min(max(frac, 0.0), 1.0)) * width)


def _smooth(p: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    """Give empty bins a little mass (taken from the others) so that KL(P || Q) stays finite."""
    zeros = p == 0
    n_zero = int(zeros.sum())
    n_nonzero = p.size - n_zero
    if n_zero == 0 or n_nonzero == 0:
        return p
    out = p.astype(np.float64).copy()
    out[zeros] = eps
    out[~zeros] -= eps * n_zero / n_nonzero
    return out


def entropy_threshold(hist: np.ndarray, amax: float, levels: int = ENTROPY_LEVELS) -> float:
    """TensorRT-style KL threshold of a histogram of |x| with bins over [0, amax].

    One iteration per candidate (about 0.4 s for 2048 bins); a matrix form over all candidates
    at once was measured slower, because each candidate only touches its first i bins.
    """
    n_bins = hist.size
    if n_bins < levels:
        raise ValueError(f"entropy calibration needs >= {levels} bins, got {n_bins}")
    width = amax / n_bins
    hist = hist.astype(np.float64)
    tail = np.concatenate([np.cumsum(hist[::-1])[::-1], [0.0]])  # tail[i] = sum(hist[i:])
    best_i, best_kl = n_bins, np.inf
    for i in range(levels, n_bins + 1):
        ref = hist[:i].copy()
        ref[i - 1] += tail[i]
        if ref.sum() == 0:
            continue
        candidate = hist[:i]
        # Split bins 0..i-1 into `levels` contiguous chunks (sizes differ by at most one bin).
        starts = (np.arange(levels) * i) // levels
        sums = np.add.reduceat(candidate, starts)
        nonzero = np.add.reduceat((candidate > 0).astype(np.float64), starts)
        sizes = np.diff(np.append(starts, i))
        per_bin = np.divide(sums, nonzero, out=np.zeros_like(sums), where=nonzero > 0)
        q = np.where(candidate > 0, np.repeat(per_bin, sizes), 0.0)
        if q.sum() == 0:
            continue
        p_dist = _smooth(ref / ref.sum())
        q_dist = _smooth(q / q.sum())
        mask = p_dist > 0
        if np.any(q_dist[mask] <= 0):  # smoothing overdrew a tiny bin: not a usable candidate
            continue
        kl = float(np.sum(p_dist[mask] * np.log(p_dist[mask] / q_dist[mask])))
        if kl < best_kl:
            best_kl, best_i = kl, i
    return float(best_i * width)
