"""Fit-speed baseline: plain CMA-ES over all eight parameters of Giovannitti et al. 2022.

X = [A, t0, tau, omega, T1, T2, Td, Tf] in one unit cube, h(t) of eq. 7 with n replicas from t0,
cost = RMSE(r - h), pycma defaults (population 4 + 3 ln 8 = 10, sigma0 = 0.3 of each range, random
start), IPOP restarts with doubled population as the paper describes. It sees the same residual
(offset and load-turn harmonics removed) and the same search bands as our estimator and evaluates
a population as one float32 array operation too, so the ratio measures the method (linear
amplitude, fewer dimensions, deterministic scan start), not numpy tricks.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import cma
import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class BaselineResult:
    amplitude_rad_s: float  # peak |d_b| of the fitted oscillation, as our estimator reports
    rmse_rad_s: float
    evaluations: int
    fit_seconds: float


def fit_baseline(
    t: Array,
    r: Array,
    tf_s: float,
    resonance_hz: tuple[float, float],
    decay_per_s: tuple[float, float],
    seed: int,
    max_evaluations: int = 60_000,
) -> BaselineResult:
    started = time.perf_counter()
    t = np.asarray(t, dtype=np.float64)
    r = np.asarray(r, dtype=np.float64)
    a_max = 3.0 * float(np.max(np.abs(r)))
    n_rep = math.ceil((t[-1] - t[0]) / tf_s) + 2
    lo = np.array(
        [
            -a_max,
            t[0] - tf_s,
            decay_per_s[0],
            2 * math.pi * resonance_hz[0],
            0.0,
            0.0,
            0.45 * tf_s,
            tf_s * 0.997,
        ]
    )
    hi = np.array(
        [
            a_max,
            t[0],
            decay_per_s[1],
            2 * math.pi * resonance_hz[1],
            0.5 * tf_s,
            0.5 * tf_s,
            0.55 * tf_s,
            tf_s * 1.003,
        ]
    )

    def cost(x_unit: Array) -> Array:
        p = lo + np.clip(x_unit, 0.0, 1.0) * (hi - lo)
        a, t0, tau, om, t1, t2, td, tf = (p[:, k][:, None] for k in range(8))
        h = np.zeros((p.shape[0], t.size))
        for i in range(n_rep):
            for shift, sign in ((0.0, 1.0), (1.0, -1.0)):
                s = t[None, :] - (t0 + i * tf + shift * td)
                win = (s >= t1) & (s <= t2)
                env = np.exp(np.where(win, -(s - t1) * tau, 0.0).astype(np.float32))
                osc = np.sin((om * s).astype(np.float32))
                h += np.where(win, sign * a * env * osc, 0.0)
        return np.sqrt(np.mean((r[None, :] - h) ** 2, axis=1))

    rng = np.random.default_rng(seed)
    best_x, best_f, evals = None, math.inf, 0
    popsize = 4 + int(3 * math.log(8))
    for _ in range(3):  # first run + 2 IPOP restarts
        es = cma.CMAEvolutionStrategy(
            list(rng.uniform(0, 1, 8)),
            0.3,
            {
                "bounds": [0, 1],
                "popsize": popsize,
                "seed": int(rng.integers(1, 2**31)),
                "maxfevals": max_evaluations - evals,
                "verbose": -9,
                "verb_log": 0,
                "tolfun": 1e-6 * float(np.std(r)),
            },
        )
        while not es.stop():
            xs = es.ask()
            es.tell(xs, cost(np.asarray(xs)).tolist())
        evals += es.result.evaluations
        if es.result.fbest < best_f:
            best_f, best_x = float(es.result.fbest), np.asarray(es.result.xbest)
        popsize *= 2
        if evals >= max_evaluations:
            break
    assert best_x is not None
    p = lo + np.clip(best_x, 0, 1) * (hi - lo)
    u = np.linspace(0, p[5] - p[4], 4000) if p[5] > p[4] else np.zeros(1)
    peak = float(np.max(np.abs(p[0] * np.exp(-u * p[2]) * np.sin(p[3] * (u + p[4])))))
    return BaselineResult(peak, best_f, evals, time.perf_counter() - started)
