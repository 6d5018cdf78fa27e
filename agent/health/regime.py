"""Change of wear regime in an indicator's history: one break of slope, found and tested.

Why: wear is often two-phase. A joint runs flat for weeks, then a tooth chips or the lubricant
goes and the indicator starts to climb. One line through the whole history is dominated by the
flat weeks and forecasts the limit far too late, and late is the dangerous direction for the
people planning the repair. Prognostics treats such histories as multi-phase degradation with a
change point and predicts from the current phase only (e.g. Bae, Yuan & Kuo, "Degradation
models with a change point", IEEE Trans. Reliability 57(1), 2008; Lin et al., "Two-phase
degradation modeling and remaining useful life prediction using nonlinear Wiener process",
Computers & Industrial Engineering 160, 2021, doi:10.1016/j.cie.2021.107533; the "first
predicting time" of the health-stage division in Lei et al., "Machinery health prognostics: a
systematic review", MSSP 104, 2018).

How: a continuous two-segment (broken-stick) line y = a + b*x + c*(x - x_k)+ is fitted by least
squares with its break x_k at each measured time that leaves at least 3 points up to it (the old
regime needs a slope of its own) and 1 after it; the break is the time with the least residual
sum of squares, which is the one with the largest |t| of the change of slope c. Whether c differs
from zero is a test whose nuisance parameter (the break time) exists only under the
alternative, so the largest |t| over the candidates is judged with Davies' upper bound on the
p-value of the supremum of a t process (R. B. Davies, "Hypothesis testing when a nuisance
parameter is present only under the alternative", Biometrika 74(1), 1987; as in V. Muggeo's R
package `segmented`, davies.test): p <= 2 [P(T_df > M) + V (1 + M^2/df)^(-(df-1)/2) / sqrt(8 pi)],
V the total variation of t over the candidates. A break is accepted below BREAK_ALPHA. With fewer
than MIN_POINTS points there is no test at all: one line is all the data can support. The
continuous model is used because wear changes its rate, not its level, when it sets in.

Least squares is not robust to the odd bad fit, so a single outlier can look like a break at the
very end; agent.health.trend therefore only re-fits its Theil-Sen line after a break with at
least MIN_AFTER points after it, and with fewer only widens the early end of the forecast
interval.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

MIN_POINTS = 6  # fewer: no test (df = n - 3 of the two-segment line would be below 3)
MIN_BEFORE = 3  # points up to and including the break: the old regime's own slope
BREAK_ALPHA = 0.01  # Davies p-value below which the change of slope is accepted
MIN_AFTER = 3  # points after the break for a Theil-Sen line of the new regime (its own + these)


@dataclass(frozen=True)
class SlopeBreak:
    """The accepted break: `index` of the point it sits on (sorted history), the least-squares
    slopes (per day) before and after it, the |t| of the change and Davies' p-value."""

    index: int
    slope_before: float
    slope_after: float
    t_stat: float
    p_value: float


def find_break(x_days: np.ndarray, y: np.ndarray, alpha: float = BREAK_ALPHA) -> SlopeBreak | None:
    """The significant break of slope in (x_days, y), sorted by time; None when there is none
    (or too few points to tell). x_days and y must be finite and of one length."""
    x = np.asarray(x_days, dtype=float)
    v = np.asarray(y, dtype=float)
    if x.shape != v.shape or x.ndim != 1:
        raise ValueError(
            f"find_break: expected two 1-D arrays of one length, found {x.shape} and {v.shape}"
        )
    n = x.size
    if n < MIN_POINTS or not (np.all(np.isfinite(x)) and np.all(np.isfinite(v))):
        return None
    # Scaled so that the normal equations stay well conditioned for any unit or time span.
    x_span, y_sd = float(np.ptp(x)), float(np.std(v))
    if x_span <= 0.0 or y_sd <= 0.0:
        return None
    xs = (x - x.mean()) / x_span
    ys = (v - v.mean()) / y_sd
    line = np.column_stack([np.ones(n), xs])
    coef0, *_ = np.linalg.lstsq(line, ys, rcond=None)
    rss0 = float(np.sum((ys - line @ coef0) ** 2))
    # A line to rounding precision: any "change" would be rounding noise.
    if rss0 <= 1e-20 * n:
        return None
    candidates = [
        k
        for k in range(MIN_BEFORE - 1, n - 1)
        if np.unique(xs[: k + 1]).size >= 2 and np.any(xs > xs[k])
    ]
    if not candidates:
        return None
    ks = np.array(candidates)
    hinge = np.maximum(xs[None, :] - xs[ks, None], 0.0)  # (m, n)
    design = np.stack(
        [np.broadcast_to(np.ones(n), hinge.shape), np.broadcast_to(xs, hinge.shape), hinge], axis=-1
    )  # (m, n, 3)
    gram = np.einsum("mni,mnj->mij", design, design)
    rhs = np.einsum("mni,n->mi", design, ys)
    try:
        inv = np.linalg.inv(gram)
    except np.linalg.LinAlgError:
        return None
    coef = np.einsum("mij,mj->mi", inv, rhs)
    resid = ys[None, :] - np.einsum("mni,mi->mn", design, coef)
    rss = np.sum(resid**2, axis=1)
    df = n - 3
    sigma2 = np.maximum(rss / df, 1e-300)
    t = coef[:, 2] / np.sqrt(sigma2 * np.maximum(inv[:, 2, 2], 1e-300))
    best = int(np.argmax(np.abs(t)))
    m_stat = float(abs(t[best]))
    variation = float(np.sum(np.abs(np.diff(t))))
    p = 2.0 * (
        float(stats.t.sf(m_stat, df))
        + variation * (1.0 + m_stat**2 / df) ** (-(df - 1) / 2.0) / math.sqrt(8 * math.pi)
    )
    p = min(1.0, p)
    if not p < alpha:
        return None
    scale = y_sd / x_span  # back to indicator units per day
    before = float(coef[best, 1]) * scale
    return SlopeBreak(
        index=int(ks[best]),
        slope_before=before,
        slope_after=before + float(coef[best, 2]) * scale,
        t_stat=m_stat,
        p_value=p,
    )
