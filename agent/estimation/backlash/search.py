"""The search behind the backlash virtual sensor (Giovannitti et al. 2022): the signature fit as a
problem on a unit cube, and the CMA-ES runs that solve it.

`SignatureProblem` holds what one fit keeps fixed (data, nuisance basis, the bounds that map the
unit cube to signature parameters) and evaluates a whole population of candidates at once, the
amplitudes in closed form. `search` starts from a deterministic scan (resonance from the
spectrum, start time and decay on a grid), lets CMA-ES refine it in pycma's ask/tell loop, and
confirms the optimum with IPOP restarts from the best point. The fit around it is
agent.estimation.backlash.fit's.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

with warnings.catch_warnings():
    # pycma warns on import when matplotlib is absent; the agent never plots through it, and
    # the warning would land in every daemon log and `make demo` output.
    warnings.filterwarnings("ignore", message="Could not import matplotlib", category=UserWarning)
    import cma
import numpy as np
import numpy.typing as npt

from agent.estimation.backlash.signature import signature_basis

Array = npt.NDArray[np.float64]

# Unit-cube coordinates searched by CMA-ES.
DIMENSIONS = ("ts", "log_tau", "freq", "duration", "td_ratio", "tf")
TS, TAU, FREQ, DUR, TD, TF = range(6)


# The working arrays of one candidate row: signature_basis's two float64 sums and its float64
# and float32 temporaries, and the projection's (about 10 float64-sized arrays per sample).
_BYTES_PER_ROW_SAMPLE = 80
# Rows of a population evaluated at once: a population of 64 candidates on a 2,401-sample
# capture is one block (12 MB); on the longest fit (agent.estimation.backlash.samples) a block
# is 3 rows.
SOLVE_BLOCK_BYTES = 64 << 20


@dataclass(frozen=True)
class SignatureProblem:
    """Everything fixed during one fit: data, nuisance basis, bounds of the unit cube."""

    t: Array
    r_proj: Array  # residual with the nuisance subspace removed
    q: Array  # orthonormal nuisance basis (N, p)
    tf_center: float
    tf_band: float
    freq_hz: tuple[float, float]
    log_tau: tuple[float, float]
    duration_s: tuple[float, float]
    td_band: float
    active: tuple[int, ...]  # coordinates CMA-ES searches; the others stay at the centre 0.5

    def full(self, x_active: Array) -> Array:
        x_active = np.atleast_2d(x_active)
        x = np.full((x_active.shape[0], len(DIMENSIONS)), 0.5)
        x[:, self.active] = x_active
        return x

    def decode(self, x: Array) -> tuple[Array, Array, Array, Array, Array, Array]:
        x = np.atleast_2d(x)
        tf = self.tf_center * (1.0 + self.tf_band * (2.0 * x[:, TF] - 1.0))
        ts = np.mod(x[:, TS], 1.0) * tf
        tau = np.exp(self.log_tau[0] + x[:, TAU] * (self.log_tau[1] - self.log_tau[0]))
        freq = self.freq_hz[0] + x[:, FREQ] * (self.freq_hz[1] - self.freq_hz[0])
        dur = self.duration_s[0] + x[:, DUR] * (self.duration_s[1] - self.duration_s[0])
        td = tf * (0.5 + self.td_band * (2.0 * x[:, TD] - 1.0))
        return ts, tau, 2.0 * math.pi * freq, dur, td, tf

    def solve(self, x: Array) -> tuple[Array, Array, Array]:
        """RMSE and the closed-form sine/cosine amplitudes of each candidate row of x, in
        blocks of rows whose working arrays stay within SOLVE_BLOCK_BYTES."""
        x = np.atleast_2d(x)
        rows = max(1, SOLVE_BLOCK_BYTES // (_BYTES_PER_ROW_SAMPLE * max(self.t.size, 1)))
        if x.shape[0] <= rows:
            return self._solve_block(x)
        parts = [self._solve_block(x[k : k + rows]) for k in range(0, x.shape[0], rows)]
        rmse, a_sin, b_cos = (np.concatenate(p) for p in zip(*parts, strict=True))
        return rmse, a_sin, b_cos

    def _solve_block(self, x: Array) -> tuple[Array, Array, Array]:
        ts, tau, omega, dur, td, tf = self.decode(x)
        s, c = signature_basis(self.t, ts, tau, omega, dur, td, tf)
        s -= (s @ self.q) @ self.q.T
        c -= (c @ self.q) @ self.q.T
        g11 = np.einsum("ij,ij->i", s, s)
        g12 = np.einsum("ij,ij->i", s, c)
        g22 = np.einsum("ij,ij->i", c, c)
        b1 = s @ self.r_proj
        b2 = c @ self.r_proj
        det = g11 * g22 - g12 * g12
        ok = det > 1e-12 * np.maximum(g11 * g22, 1e-300)
        safe = np.where(ok, det, 1.0)
        a_sin = np.where(ok, (g22 * b1 - g12 * b2) / safe, 0.0)
        b_cos = np.where(ok, (g11 * b2 - g12 * b1) / safe, 0.0)
        sse = float(self.r_proj @ self.r_proj) - (a_sin * b1 + b_cos * b2)
        rmse = np.sqrt(np.maximum(sse, 0.0) / self.t.size)
        return rmse, a_sin, b_cos

    def model(self, x: Array, a_sin: float, b_cos: float) -> Array:
        """The fitted signature itself (not projected)."""
        ts, tau, omega, dur, td, tf = self.decode(x)
        s, c = signature_basis(self.t, ts, tau, omega, dur, td, tf)
        return np.asarray(a_sin * s[0] + b_cos * c[0])

    def project(self, y: Array) -> Array:
        """y without its offset and load-turn harmonics, as the fit compares it."""
        rest: Array = y - self.q @ (self.q.T @ y)
        return rest


@dataclass
class SearchOutcome:
    x: Array
    rmse: float
    evaluations: int = 0
    restarts: int = 0
    converged: bool = False
    stop_reason: str = ""
    history: list[float] = field(default_factory=list)
    # The optimum of every run (scan's run, then each restart): the uncertainty of the fit is
    # checked against how far apart equally good optima lie.
    runs: list[tuple[Array, float]] = field(default_factory=list)


def _initial_point(problem: SignatureProblem) -> Array:
    """Deterministic start: resonance from the spectrum, then a grid over start time and decay."""
    r = problem.r_proj
    dt = float(np.median(np.diff(problem.t)))
    spec = np.abs(np.fft.rfft(r * np.hanning(r.size)))
    freqs = np.fft.rfftfreq(r.size, dt)
    band = (freqs >= problem.freq_hz[0]) & (freqs <= problem.freq_hz[1])
    f_peak = float(freqs[band][np.argmax(spec[band])]) if np.any(band) else problem.freq_hz[0]
    x_freq = (f_peak - problem.freq_hz[0]) / (problem.freq_hz[1] - problem.freq_hz[0])
    n_ts, taus = 64, np.linspace(0.2, 0.8, 4)
    grid = np.full((n_ts * taus.size, len(DIMENSIONS)), 0.5)
    grid[:, TS] = np.repeat(np.arange(n_ts) / n_ts, taus.size)
    grid[:, TAU] = np.tile(taus, n_ts)
    grid[:, FREQ] = x_freq
    grid[:, DUR] = 0.8
    best_rows = []
    for chunk in np.array_split(grid, 4):
        rmse, _, _ = problem.solve(chunk)
        best_rows.append((float(rmse.min()), chunk[int(np.argmin(rmse))]))
    return np.array(min(best_rows, key=lambda p: p[0])[1])


# Initial standard deviations per coordinate (unit cube): a grid cell in start time, a fair
# share of the decay and duration ranges, a few spectral bins in frequency.
_STDS = np.array([1.0 / 64, 0.15, 0.05, 0.3, 0.3, 0.3])
# CMA-ES stops when the RMSE changes by less than this share of the residual's RMS, or the
# search distribution shrinks below this size in the unit cube.
_TOLS = (1e-5, 1e-6)
_CONVERGED_REASONS = {"tolfun", "tolfunhist", "tolx", "tolstagnation", "tolflatfitness"}


def _run_cma(
    problem: SignatureProblem, x0: Array, stds: Array, popsize: int, seed: int, budget: int
) -> tuple[Array, float, int, str]:
    """One CMA-ES run in pycma's ask/tell loop over the active coordinates."""
    active = list(problem.active)
    lower = [-np.inf if i == TS else 0.0 for i in active]  # start time is periodic
    upper = [np.inf if i == TS else 1.0 for i in active]
    scale = float(np.sqrt(np.mean(problem.r_proj**2))) or 1.0
    opts = {
        "bounds": [lower, upper],
        "seed": seed,
        "popsize": popsize,
        "CMA_stds": list(stds[active]),
        "maxfevals": budget,
        "tolfun": _TOLS[0] * scale,
        "tolfunhist": 0.1 * _TOLS[0] * scale,
        "tolx": _TOLS[1],
        "verbose": -9,
        "verb_log": 0,
        "verb_disp": 0,
    }
    es = cma.CMAEvolutionStrategy(list(x0[active]), 1.0, opts)
    while not es.stop():
        xs = es.ask()
        rmse, _, _ = problem.solve(problem.full(np.asarray(xs)))
        es.tell(xs, rmse.tolist())
    best = problem.full(np.asarray(es.result.xbest, dtype=np.float64))[0]
    reason = ",".join(sorted(es.stop()))
    return best, float(es.result.fbest), int(es.result.evaluations), reason


def search(
    problem: SignatureProblem, *, seed: int, max_restarts: int, max_evaluations: int
) -> SearchOutcome:
    """Scan, CMA-ES, then IPOP restarts (doubled population, wide spread from the best point)
    until one lands on the same optimum (RMSE within 0.1 %), keeping the best seen."""
    rng = np.random.default_rng(seed)
    base_pop = 4 + int(3 * math.log(len(problem.active)))
    budget = max_evaluations
    x, f, evals, reason = _run_cma(
        problem, _initial_point(problem), _STDS, base_pop, int(rng.integers(1, 2**31)), budget
    )
    out = SearchOutcome(x=x, rmse=f, evaluations=evals, stop_reason=reason)
    out.converged = bool(set(reason.split(",")) & _CONVERGED_REASONS)
    out.history.append(f)
    out.runs.append((x, f))
    popsize = base_pop
    agreed = max_restarts == 0
    for _ in range(max_restarts):
        if out.evaluations >= budget:
            break
        popsize *= 2
        x, f, evals, reason = _run_cma(
            problem,
            out.x,
            np.minimum(_STDS * 8.0, 0.3),
            popsize,
            int(rng.integers(1, 2**31)),
            budget - out.evaluations,
        )
        out.evaluations += evals
        out.restarts += 1
        out.history.append(f)
        out.runs.append((x, f))
        same = abs(f - out.rmse) <= 1e-3 * out.rmse
        if f < out.rmse:
            out.x, out.rmse, out.stop_reason = x, f, reason
            out.converged = bool(set(reason.split(",")) & _CONVERGED_REASONS)
        if same:
            agreed = True
            break
    if not agreed:
        out.stop_reason += ";restarts did not confirm the optimum"
    return out
