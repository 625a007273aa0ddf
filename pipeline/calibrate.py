"""Fit a hardware file's free overhead parameters to every documented figure at once.

The procedure is data, not code: a calibration file names the hardware, the
studies whose stages carry ``documented`` figures, and the parameters to fit.
Every parameter carries a sourced *prior* (an upstream cost-model value, a CANN
or published chip figure, or a first estimate that says so); the search starts
from the prior, never from the last fit, so refitting cannot drift, and its
bounds lie within 0.5x-2x of the prior unless the file states a physical reason
for wider ones.  A fit that ends on a bound is a failure: the figures want a
value the sources rule out, which means a mechanism is missing or mis-priced,
and writing that value back would hide it.

Each stage is compiled once: a Program holds hardware-independent work that the
machine prices, so an evaluation only re-simulates the stages with trial
parameters.  The score weights studies, not figures: each study contributes its
weight times the mean squared log-ratio (simulated vs documented) over its
figures, so a study with many figures does not drown one with few.  A bounded,
deterministic pattern search in log space minimises the score, from the priors and
from the file's other deterministic starts (``Starts``: the score has separate
basins); the fitted values go to the hardware's generated overlay (``<name>.fit.toml``, one
provenance header), never into the facts file people write.
"""
from __future__ import annotations

import copy
import math
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from pydantic import Field, ValidationError, model_validator

from simcore.compiler import compile_kernel
from simcore.compiler.limits import Limits
from simcore.machine import simulate
from simcore.spec.base import Strict
from simcore.spec.errors import ConfigError
from simcore.spec.hardware import (Hardware, Race, dotted_values, fit_overlay, load_hardware,
                                   race_median, race_variants, value_at, with_values)
from simcore.spec.loader import read_mapping, validate
from simcore.spec.study import find_config, load_study

from .emit.atomic import write_text
from .emit.metrics import mechanism_figures
from .pipe_shares import PIPE_SHARES, PIPE_SHARE_NAMES
from .runner import resolve_kernel

METRICS = ("kernel_us", "e2e_us")
# Documented figures of what the chip did rather than how long it took (a profile's pipe busy
# shares, its L2 hit rate): never fitted, compared on the held-out cases to say which of the
# model's mechanisms a prediction's error comes from.
MECHANISMS = PIPE_SHARE_NAMES + ("l2_hit_rate",)
# A fitted value this close to a bound (relative) counts as sitting on it.
TARGET = 0.10      # the error the model aims to stay within on a documented figure
ON_BOUND = 0.01


class Parameter(Strict):
    path: str = Field(pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")   # e.g. aicpu.init_us
    prior: float = Field(gt=0)          # the sourced value the search starts from
    source: str = Field(min_length=3)   # where the prior comes from, in words
    low: float | None = Field(None, gt=0)    # default 0.5 x prior
    high: float | None = Field(None, gt=0)   # default 2 x prior
    physical_bound: str | None = Field(None, min_length=3)  # why bounds may leave 0.5x-2x
    # why the fit leaves it at its prior: a free fit pushed it onto a bound, so the figures
    # ask for a value its source rules out and the mechanism behind it is what is missing
    held: str | None = Field(None, min_length=3)
    # parameters that share a cause (one AICPU core does every per-action step) name one
    # group: besides moving each alone, the search scales a group's free members together
    group: str | None = Field(None, pattern=r"^[a-z0-9_]+$")

    @model_validator(mode="after")
    def _bounds(self):
        low, high = self.bounds
        if not low < high:
            raise ValueError(f"{self.path}: low {low:g} must be below high {high:g}")
        if not low * (1 + ON_BOUND) < self.prior < high * (1 - ON_BOUND):
            raise ValueError(f"{self.path}: prior {self.prior:g} lies outside its bounds "
                             f"[{low:g}, {high:g}] or on one; the search starts at the prior, "
                             f"so widen the bounds around it")
        tight = (0.5 * self.prior * (1 - 1e-9), 2 * self.prior * (1 + 1e-9))
        if self.physical_bound is None and (low < tight[0] or high > tight[1]):
            raise ValueError(
                f"{self.path}: bounds [{low:g}, {high:g}] leave [0.5, 2] x prior = "
                f"[{0.5 * self.prior:g}, {2 * self.prior:g}]; narrow them, or state why the "
                f"chip allows more in a 'physical_bound' field")
        return self

    @property
    def bounds(self) -> tuple[float, float]:
        return (self.low if self.low is not None else 0.5 * self.prior,
                self.high if self.high is not None else 2.0 * self.prior)


class SourcedFigure(Strict):
    """A documented profile figure of a held-out study that a hardware file takes a value
    from: validate still sets it beside the model's, marked, since it is no prediction."""
    figure: str
    stages: list[str] | None = None     # default: every stage of the study
    source: str = Field(min_length=3)   # which value of the hardware file, in words

    @model_validator(mode="after")
    def _known(self):
        if self.figure not in MECHANISMS:
            raise ValueError(f"sourced figure '{self.figure}' is not a profile figure "
                             f"validate compares (known: {', '.join(MECHANISMS)})")
        return self


class StudyRef(Strict):
    study: str
    metrics: list[str] | None = None   # default: every documented metric of its stages
    # default: every stage with a documented figure; a study may put some stages in the
    # fit and others in held_out
    stages: list[str] | None = None
    weight: float = Field(1.0, gt=0)
    # measured as the median over the hardware's race variants (its [race] table)
    race: bool = False
    # held-out profile figures a hardware value was taken from (validate marks them)
    sourced: list[SourcedFigure] = Field(default_factory=list)

    @model_validator(mode="after")
    def _known(self):
        bad = sorted(set(self.metrics or ()) - set(METRICS))
        if bad:
            raise ValueError(f"unknown metric {', '.join(bad)} (known: {', '.join(METRICS)})")
        return self


class PhysicsCheck(Strict):
    """A kernel the fit never sees, timed against its roofline.

    ``flops`` and ``bytes`` are expressions over the kernel's params: the work it
    must do and the HBM traffic it cannot avoid.  The roofline time is the larger
    of flops / cube peak and bytes / HBM bandwidth; the check passes when
    roofline time / simulated kernel time lies in ``within``.
    """
    name: str
    kernel: str
    set: dict = Field(default_factory=dict)
    flops: str | int
    bytes: str | int
    within: list[float] = Field(min_length=2, max_length=2)   # [lowest, highest] efficiency
    why: str = Field(min_length=3)

    @model_validator(mode="after")
    def _range(self):
        if not 0 < self.within[0] < self.within[1]:
            raise ValueError(f"physics check {self.name}: within must be [low, high] with "
                             f"0 < low < high")
        return self


class Roofline(Strict):
    hbm_gbps: float = Field(gt=0)          # the chip's published HBM bandwidth
    hbm_source: str = Field(min_length=3)
    # fp16 flops one AIC does per cycle (one 16x16x16 fractal, 2 flops per multiply-add)
    cube_flops_per_cycle: float = Field(gt=0)
    cube_source: str = Field(min_length=3)


def _overlapping(refs: list[StudyRef]) -> list[str]:
    """One name per study (or study/stage) that two references both select: each study is
    listed once, or split by disjoint ``stages`` between the fit and held_out."""
    names = []
    for i, ref in enumerate(refs):
        for other in refs[i + 1:]:
            if other.study != ref.study:
                continue
            if ref.stages is None or other.stages is None:
                names += [ref.study, ref.study]
            else:
                names += [f"{ref.study}/{st}" for st in ref.stages if st in other.stages] * 2
    return names


class Starts(Strict):
    """Where the search starts.  The score of a discrete-event simulation has separate
    basins (a sub-percent change of a cost can hand a chain of tasks to another schedule
    thread), so one local search from the priors finds the basin nearest them, not the
    best.  The first start is the priors; each other one multiplies every prior by a
    factor drawn uniformly in log space from ``spread`` (clipped to the bounds) by a
    generator seeded with ``seed``, so the starts, and the fit, are the same every run."""
    count: int = Field(1, ge=1, le=64)
    spread: list[float] = Field(default_factory=lambda: [0.7, 1.4], min_length=2, max_length=2)
    seed: int = 20261204
    # an on-bound minimum that scores this much (relative) below the best one inside every
    # bound is what the figures ask for: the fit ends there, and fails naming the bound;
    # a smaller difference is within what a race draw moves the score
    bound_tolerance: float = Field(0.05, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _ordered(self):
        if not 0 < self.spread[0] <= 1 <= self.spread[1]:
            raise ValueError(f"spread {list(self.spread)}: expected [low, high] with "
                             f"0 < low <= 1 <= high (factors on the priors)")
        return self


class Calibration(Strict):
    hardware: str
    studies: list[StudyRef] = Field(min_length=1)
    # studies whose documented figures the fit never sees: validate predicts them with the
    # shipped model and with a fresh fit, which is what a user's next kernel gets
    held_out: list[StudyRef] = Field(default_factory=list)
    parameters: list[Parameter] = Field(min_length=1)
    max_evaluations: int = Field(300, ge=1, le=100000)
    # per leave-one-out refit; by default the full fit's: a refit solves a problem of the
    # same size, and one cut short predicts with the optimiser's stopping point
    loo_max_evaluations: int | None = Field(None, ge=1, le=100000)
    roofline: Roofline | None = None
    physics: list[PhysicsCheck] = Field(default_factory=list)
    starts: Starts = Field(default_factory=Starts)

    @property
    def free(self) -> list[Parameter]:
        """The parameters the fit moves; held ones stay at their priors (the facts)."""
        return [p for p in self.parameters if p.held is None]

    @model_validator(mode="after")
    def _unique(self):
        for what, names in (("parameter", [p.path for p in self.parameters]),
                            ("study", _overlapping(self.studies + self.held_out)),
                            ("physics check", [c.name for c in self.physics])):
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"{what} {', '.join(dup)} is listed twice")
        if self.physics and self.roofline is None:
            raise ValueError("physics checks need a 'roofline' (HBM bandwidth and cube rate)")
        fitted = sorted(r.study for r in self.studies if r.sourced)
        if fitted:
            raise ValueError(f"study {', '.join(fitted)} lists 'sourced' figures but is fitted: "
                             f"profile figures are compared on held_out studies only, so "
                             f"move 'sourced' to its held_out entry")
        return self


@dataclass
class Fit:
    values: dict[str, float]
    score: float
    evaluations: int
    table: list[dict]
    on_bound: list[tuple[str, str, float, float]] = field(default_factory=list)
    # False when the search stopped at its budget before its step reached STEP_FLOOR: the
    # values are then where the search was, not a minimum
    converged: bool = True
    # every start's search: its score, evaluations, whether it converged and the parameters
    # it left on a bound; ``start`` is the one the fit took
    starts: list[dict] = field(default_factory=list)
    start: int = 0


def _check_free(hw: Hardware, p: Parameter) -> None:
    """A fittable parameter exists and prices the work; it never changes the mapping."""
    value_at(hw, p.path)
    for bound in p.bounds:
        try:
            trial = with_values(hw, {p.path: bound})
        except ValidationError as exc:
            raise ConfigError(f"parameter '{p.path}': bound {bound:g} is not a valid value "
                              f"({exc.errors(include_url=False)[0]['msg']}); narrow its "
                              f"low/high.") from None
        if Limits.of(trial) != Limits.of(hw):
            raise ConfigError(f"parameter '{p.path}' decides how the compiler maps the kernel "
                              f"(a buffer capacity or core count): it is a fact of the chip, "
                              f"not a free parameter; remove it from the calibration file.")


@dataclass
class Case:
    """One documented figure group: a study stage and the figures it documents."""
    study: str
    stage: str
    metrics: list[str]
    documented: dict[str, float]
    kernel: object
    program: object
    race: bool = False      # measured as the median over the hardware's race variants
    checks: dict[str, float] = field(default_factory=dict)   # documented MECHANISMS figures
    sourced: dict[str, str] = field(default_factory=dict)    # of them, those a value is from

    @property
    def name(self) -> str:
        return f"{self.study}/{self.stage}"


def _known_stages(name: str, study, path: Path, field: str, stages) -> None:
    """Refuse stage names the study lacks, naming the calibration file's ``field``."""
    unknown = sorted(set(stages) - {s.name for s in study.stages})
    if unknown:
        raise ConfigError(f"study '{name}' has no stage {', '.join(unknown)} "
                          f"(its stages: {', '.join(s.name for s in study.stages)}); fix "
                          f"'{field}' in the calibration file.", source=str(path))


class Problem:
    def __init__(self, cal: Calibration, configs: Path):
        self.cal, self.configs = cal, Path(configs)
        self.hw_path = find_config(self.configs / "hardware", cal.hardware, "hardware")
        # The fit prices on the facts file alone: the overlay of an earlier fit is what it
        # replaces, so none of its values (fitted or not) leaks into this one.
        self.hw = validate(Hardware, read_mapping(self.hw_path), str(self.hw_path), "hardware")
        for p in cal.parameters:
            _check_free(self.hw, p)
        racing = [s.study for s in cal.studies + cal.held_out if s.race]
        if racing and self.hw.race is None:
            raise ConfigError(f"studies {', '.join(racing)} are marked race but the hardware "
                              f"file has no [race] table (the cost paths to scale and the "
                              f"factors); add one (see configs/hardware/dav_2201.toml) or "
                              f"drop 'race' from those studies.", source=str(self.hw_path))
        self.weights = {ref.study: ref.weight for ref in cal.studies}
        self.cases: list[Case] = [c for ref in cal.studies for c in self._cases(ref)]
        self._held: list[Case] | None = None

    @property
    def held(self) -> list[Case]:
        """The held-out cases: never part of a fit or a score, only measured to predict
        them; compiled when first asked for, so a fit does not wait for them."""
        if self._held is None:
            self._held = [c for ref in self.cal.held_out for c in self._cases(ref, True)]
        return self._held

    def _cases(self, ref: StudyRef, held: bool = False) -> list[Case]:
        study_path = find_config(self.configs / "studies", ref.study, "study")
        study = load_study(study_path)
        kernel_path = find_config(self.configs / "kernels", study.kernel, "kernel")
        wanted = ref.metrics or list(METRICS)
        _known_stages(ref.study, study, study_path, "stages", ref.stages or ())
        found = [(s, [m for m in wanted if m in s.documented]) for s in study.stages
                 if ref.stages is None or s.name in ref.stages]
        found = [(s, ms) for s, ms in found if ms]
        if not found:
            raise ConfigError(f"no stage of study '{ref.study}' documents any of "
                              f"{', '.join(wanted)}; add 'documented' figures to its "
                              f"stages or drop the study from the calibration file.",
                              source=str(study_path))
        _known_stages(ref.study, study, study_path, "sourced",
                      [st for f in ref.sourced for st in f.stages or ()])
        cases = []
        for stage, metrics in found:
            kernel = resolve_kernel(kernel_path, stage.set)
            # profile figures are only compared on held-out stages: a fit never measures them
            checks = {m: float(v) for m, v in stage.documented.items()
                      if held and m in MECHANISMS}
            sourced = {f.figure: f.source for f in ref.sourced
                       if f.figure in checks and (f.stages is None or stage.name in f.stages)}
            cases.append(Case(ref.study, stage.name, metrics,
                              {m: float(stage.documented[m]) for m in metrics},
                              kernel, compile_kernel(kernel, self.hw), ref.race, checks,
                              sourced))
        return cases

    @property
    def names(self) -> list[str]:
        return [p.path for p in self.cal.free]

    def measure(self, values: dict[str, float], cases: list[Case] | None = None,
                base: Hardware | None = None) -> list[dict]:
        hw = with_values(self.hw if base is None else base, values)
        variants = None     # the race variants of hw, built when a racing case asks
        rows = []
        for case in self.cases if cases is None else cases:
            if case.race:
                variants = variants or [v for _, v in race_variants(hw)]
                runs = [timed(v, case) for v in variants]
            else:
                runs = [timed(hw, case)]
            row = {"case": case.name, "study": case.study, "stage": case.stage,
                   "metrics": case.metrics}
            for m in case.metrics:
                row[m], lo, hi = race_median(r[m] for r in runs)
                if case.race:
                    row[f"spread_{m}"] = (lo, hi)
                row[f"documented_{m}"] = case.documented[m]
            if case.checks:
                row["checks"] = {m: (race_median(r[m] for r in runs)[0], doc)
                                 for m, doc in case.checks.items()}
            if case.sourced:
                row["sourced"] = dict(case.sourced)
            rows.append(row)
        return rows

    def score_rows(self, rows: list[dict]) -> float:
        """Sum over studies of weight x mean squared log-ratio over the study's figures."""
        per: dict[str, list[float]] = {}
        for r in rows:
            per.setdefault(r["study"], []).extend(
                math.log(r[m] / r[f"documented_{m}"]) ** 2 for m in r["metrics"])
        return sum(self.weights[s] * sum(v) / len(v) for s, v in per.items())

    def score(self, values: dict[str, float], exclude: frozenset[str] = frozenset()) -> float:
        return self.score_rows(self.measure(values, [c for c in self.cases
                                                     if c.name not in exclude]))


def timed(hw: Hardware, case: Case) -> dict[str, float]:
    tl = simulate(hw, case.program, case.kernel.options.runtime_options)
    times = {"kernel_us": tl.kernel_us, "e2e_us": tl.e2e_us}
    return {**times, **mechanism_figures(case.program, tl)} if case.checks else times


# the compass search's smallest step in log space: x1.005, finer than a fitted value's four
# significant digits move the figures
STEP_FLOOR = 0.005


def compass_search(f, x0: np.ndarray, low: np.ndarray, high: np.ndarray, max_evals: int,
                   directions: np.ndarray | None = None):
    """Deterministic pattern search in log space.

    Try each direction up and down by ``step``; keep any move that improves the
    score and repeat it while it keeps improving; halve the step when no move
    helps.  Robust to the small steps a discrete-event simulation puts in the
    score, where gradient-like methods stall.  ``directions`` (rows, default one per
    parameter) may add moves of several parameters at once: a race median is flat
    along each single cost and falls only when the costs that share a cause move
    together.

    Returns the best point, its score, the evaluations spent and whether the search
    converged (its step fell below STEP_FLOOR) rather than stopped at ``max_evals``.
    """
    directions = np.eye(len(x0)) if directions is None else directions
    x, best = np.clip(x0, low, high), f(np.clip(x0, low, high))
    evals, step = 1, 0.25   # x1.28: well inside the 0.5x-2x bounds, so early moves do not jump onto them
    while evals < max_evals and step > STEP_FLOOR:
        improved = False
        for d in directions:
            for sign in (1.0, -1.0):
                while evals < max_evals:
                    trial = np.clip(x + sign * step * d, low, high)
                    if np.array_equal(trial, x):
                        break
                    score = f(trial)
                    evals += 1
                    if score >= best:
                        break
                    x, best, improved = trial, score, True
        if evals >= max_evals:
            # cut short inside a sweep: some moves at this step were never tried, so the
            # step stays where it is and the search has not converged
            break
        if not improved:
            step /= 2
    return x, best, evals, step <= STEP_FLOOR


def search_directions(free: list[Parameter]) -> np.ndarray:
    """One direction per free parameter, then one per group of two or more free members
    (every member moved by the same step: the group scaled by one factor)."""
    rows = list(np.eye(len(free)))
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(free):
        if p.group is not None:
            groups.setdefault(p.group, []).append(i)
    for members in groups.values():
        if len(members) > 1:
            d = np.zeros(len(free))
            d[members] = 1.0
            rows.append(d)
    return np.asarray(rows, float).reshape(len(rows), len(free))


def on_bounds(cal: Calibration, values: dict[str, float]) -> list[tuple[str, str, float, float]]:
    """(path, 'low'|'high', value, bound) for every value within ON_BOUND of a bound."""
    hits = []
    for p in cal.free:
        low, high = p.bounds
        value = values[p.path]
        if value <= low * (1 + ON_BOUND):
            hits.append((p.path, "low", value, low))
        elif value >= high * (1 - ON_BOUND):
            hits.append((p.path, "high", value, high))
    return hits


def _log_bounds(cal: Calibration) -> tuple[np.ndarray, np.ndarray]:
    """The free parameters' bounds in the search's log space."""
    return np.log([p.bounds[0] for p in cal.free]), np.log([p.bounds[1] for p in cal.free])


def start_points(cal: Calibration) -> list[np.ndarray]:
    """The searches' starting points in log space: the priors, then ``starts.count - 1``
    deterministic draws around them (``Starts``)."""
    low, high = _log_bounds(cal)
    prior = np.log([p.prior for p in cal.free])
    rng = np.random.default_rng(cal.starts.seed)
    lo, hi = np.log(cal.starts.spread[0]), np.log(cal.starts.spread[1])
    return [prior] + [np.clip(prior + rng.uniform(lo, hi, prior.size), low, high)
                      for _ in range(cal.starts.count - 1)]


# the problem the forked workers of ``_searches`` search (set before they fork)
_SEARCH: tuple | None = None


def _search(x0: np.ndarray):
    problem, exclude, budget = _SEARCH
    cal, names = problem.cal, problem.names
    low, high = _log_bounds(cal)
    objective = lambda x: problem.score(dict(zip(names, np.exp(x))), exclude)
    return compass_search(objective, x0, low, high, budget, search_directions(cal.free))


def _cores() -> int:
    """The cores this process may run on (its affinity mask, where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _searches(problem: Problem, exclude: frozenset[str], budget: int) -> list[tuple]:
    """One compass search per start point, side by side on the machine's cores (forked
    workers on Linux: each search is deterministic, so where it runs does not change its
    result; a worker that dies raises BrokenProcessPool instead of hanging the fit)."""
    global _SEARCH
    points = start_points(problem.cal)
    _SEARCH = (problem, exclude, budget)
    try:
        workers = min(len(points), _cores())
        if workers < 2 or not sys.platform.startswith("linux"):
            return [_search(x0) for x0 in points]
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) \
                as pool:
            return list(pool.map(_search, points))
    finally:
        _SEARCH = None


def _choose(cal: Calibration, found: list[tuple]) -> int:
    """The start whose minimum the fit takes: the lowest score inside every bound among
    the searches that converged, unless one on a bound scores lower by more than
    ``starts.bound_tolerance`` (the figures ask for it: the fit then fails on that bound).
    A search cut short by its budget is not a minimum and is not compared; without a
    converged search, the lowest score of all (the fit then reports it unconverged)."""
    names = [p.path for p in cal.free]
    key = lambda i: (found[i][1], i)
    done = [i for i, r in enumerate(found) if r[3]]
    if not done:
        return min(range(len(found)), key=key)
    inside = [i for i in done
              if not on_bounds(cal, dict(zip(names, np.exp(found[i][0]))))]
    best = min(done, key=key)
    if not inside:
        return best
    best_inside = min(inside, key=key)
    if found[best][1] < found[best_inside][1] * (1 - cal.starts.bound_tolerance):
        return best
    return best_inside


def fit_problem(problem: Problem, exclude: frozenset[str] = frozenset(),
                max_evaluations: int | None = None) -> Fit:
    """Fit from the priors (never from the last fit) and from the procedure's other
    deterministic starts, leaving out the ``exclude`` cases."""
    cal, names = problem.cal, problem.names
    found = _searches(problem, exclude, max_evaluations or cal.max_evaluations)
    pick = _choose(cal, found)
    best, _, evals, converged = found[pick]
    values = {n: float(f"{v:.4g}") for n, v in zip(names, np.exp(best))}
    table = problem.measure(values)
    used = [r for r in table if r["case"] not in exclude]
    starts = [{"score": float(r[1]), "evaluations": int(r[2]), "converged": bool(r[3]),
               "on_bound": [h[0] for h in on_bounds(cal, dict(zip(names, np.exp(r[0]))))]}
              for r in found]
    return Fit(values, problem.score_rows(used), evals, table, on_bounds(cal, values),
               converged, starts, pick)


def start_summary(fit: Fit) -> str:
    """Which start the fit took, and what the others found (one line)."""
    if len(fit.starts) < 2:
        return "one start, the priors"
    others = ", ".join(("priors" if i == 0 else f"start {i}") + f" {r['score']:.4f}"
                       + (" on a bound" if r["on_bound"] else "")
                       + ("" if r["converged"] else " unconverged")
                       for i, r in enumerate(fit.starts) if i != fit.start)
    which = "the priors" if fit.start == 0 else f"start {fit.start}"
    # the starts are compared by their search minima; the fit's own score is taken again at
    # its values rounded to four digits, which a racing case can move
    own = fit.starts[fit.start]["score"]
    return (f"best of {len(fit.starts)} starts, from {which} (its search minimum {own:.4f}, "
            f"before the values are rounded to four digits; the others: {others})")


def fit(cal: Calibration, configs: Path) -> tuple[Fit, Problem]:
    problem = Problem(cal, configs)
    return fit_problem(problem), problem


def bound_failures(fit: Fit) -> list[str]:
    """One line per parameter the fit pushed onto a bound, naming the direction."""
    return [f"{path} ended on its {side} bound ({value:g}, bound {bound:g}): the figures "
            f"want it {'lower' if side == 'low' else 'higher'} than its sources allow, so a "
            f"mechanism is missing or mis-priced; fix the model or the prior, not the bound"
            for path, side, value, bound in fit.on_bound]


def stage_lines(table: list[dict]) -> list[str]:
    """One line per case: simulated vs documented figure of every metric it documents."""
    return [f"{row['case']}: " + "  ".join(
        f"{m} {row[m]:.1f} (documented {row['documented_' + m]:g}, "
        f"{100 * (row[m] / row['documented_' + m] - 1):+.1f}%{_race_range(row, m)})"
        for m in row["metrics"]) for row in table]


def _race_range(row: dict, m: str) -> str:
    """', race a-b' for a racing case's metric (its smallest and largest run), else ''."""
    spread = row.get(f"spread_{m}")
    return f", race {spread[0]:.0f}-{spread[1]:.0f}" if spread else ""


def fit_date() -> str:
    """Today (UTC), or the day of SOURCE_DATE_EPOCH when set, for reproducible output."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    moment = datetime.fromtimestamp(int(epoch), timezone.utc) if epoch else \
        datetime.now(timezone.utc)
    return moment.date().isoformat()


def render_fit(facts_path: Path, values: dict[str, float], cal_path: str, cal: Calibration,
               fit: Fit, date: str) -> str:
    """The overlay's text: a provenance header, then the fitted values in the facts file's
    order of keys, each as a float written the shortest way that reads back exactly."""
    facts = read_mapping(facts_path)
    order = [path for path, _ in dotted_values(facts) if path in values]
    figures = sum(len(r["metrics"]) for r in fit.table)
    studies = ", ".join(s.study for s in cal.studies)
    header = [
        f"# Fitted values for {facts_path.name}, generated by ptolab calibrate: do not edit.",
        "# The loader merges them over the facts file, each replacing the value of its key.",
        f"# procedure: {cal_path} (bounded pattern search in log space from the priors "
        f"and the file's other starts; priors, sources and bounds in that file)",
        f"# command: ptolab calibrate {cal_path}",
        f"# date: {date}",
        f"# search: {start_summary(fit)}; converged after {fit.evaluations} evaluations "
        f"(its step below x{math.exp(STEP_FLOOR):.3f})",
        f"# data: studies {studies}: {figures} documented figures of {len(fit.table)} stages",
        f"# score: {fit.score:.4f} (per study, weight x mean squared log-ratio, simulated vs "
        f"documented; summed over studies)",
        *(f"#   {line}" for line in stage_lines(fit.table)),
        *(f"# held at its prior (the facts value): {p.path}: {p.held}"
          for p in cal.parameters if p.held),
    ]
    body, section = [], None
    for path in order:
        table, key = path.rsplit(".", 1)
        if table != section:
            body += ["", f"[{table}]"]
            section = table
        body.append(f"{key} = {float(values[path])!r}")
    return "\n".join(header + body) + "\n"


def write_fit(facts_path: Path, values: dict[str, float], cal_path: str, cal: Calibration,
              fit: Fit, date: str | None = None) -> Path:
    """Write the overlay beside the facts file (atomically); the facts file is untouched."""
    facts_path = Path(facts_path)
    missing = sorted(set(values) - {path for path, _ in dotted_values(read_mapping(facts_path))})
    if missing:
        raise ConfigError(f"cannot fit {', '.join(missing)}: not a value of the facts file.",
                          source=str(facts_path))
    if fit.on_bound:
        raise ConfigError("refusing to write a fit that ends on a bound: "
                          + "; ".join(bound_failures(fit)) + ".", source=cal_path)
    if not fit.converged:
        raise ConfigError(f"refusing to write a fit whose search stopped at its budget "
                          f"({fit.evaluations} evaluations) before converging; raise "
                          f"max_evaluations.", source=cal_path)
    overlay = fit_overlay(facts_path)
    write_text(overlay, render_fit(facts_path, values, cal_path, cal, fit, date or fit_date()))
    return overlay


def _precheck(data: dict, path: Path) -> None:
    """Name the parameter and say what to add when a prior, source or bound is wrong."""
    params = data.get("parameters")
    if not isinstance(params, list):
        return
    for i, p in enumerate(params):
        if not isinstance(p, dict):
            continue
        name = p.get("path", f"parameters[{i}]")
        for key, what in (("prior", "the sourced value the fit starts from (a number)"),
                          ("source", "where that value comes from: an upstream file, a CANN "
                                     "document, a published chip figure, or 'first estimate'")):
            if key not in p:
                raise ConfigError(
                    f"parameter '{name}' (field parameters[{i}].{key}) has no {key}: every "
                    f"fitted parameter needs a '{key}', {what}. Add it, or drop the "
                    f"parameter from the calibration file.", source=str(path))


def load_calibration(path: Path) -> Calibration:
    path = Path(path)
    data = read_mapping(path)
    _precheck(data, path)
    return validate(Calibration, data, str(path), "calibration")


# --- validation: what the fit never sees ---------------------------------------------------

def _errors(row: dict) -> dict[str, float]:
    return {m: row[m] / row[f"documented_{m}"] - 1 for m in row["metrics"]}


def _rms_log(rows: list[dict]) -> float:
    logs = [math.log(r[m] / r[f"documented_{m}"]) for r in rows for m in r["metrics"]]
    return math.sqrt(sum(v * v for v in logs) / len(logs)) if logs else 0.0


def largest_moves(before: dict[str, float], after: dict[str, float], count: int = 2,
                  floor: float = 1.1) -> list[tuple[str, float, float]]:
    """The ``count`` parameters whose value moved furthest by ratio from ``before`` to
    ``after`` (``(path, before, after)``, furthest first), those that moved by at least
    ``floor``x either way; ties go to the path's name, so the order is deterministic."""
    ratios = {path: abs(math.log(after[path] / before[path])) for path in before
              if path in after and before[path] > 0 and after[path] > 0}
    ranked = sorted((-r, path) for path, r in ratios.items() if r >= math.log(floor))
    return [(path, before[path], after[path]) for _, path in ranked[:count]]


def leave_one_out(problem: Problem, max_evaluations: int) -> list[dict]:
    """Refit (from the procedure's starts) without each case in turn and predict it.

    A case is one documented figure group: a study stage with its documented
    metrics.  The refit never simulates the case it predicts.
    """
    out = []
    for case in problem.cases:
        refit = fit_problem(problem, frozenset({case.name}), max_evaluations)
        row = next(r for r in refit.table if r["case"] == case.name)
        out.append({"case": case.name, "fit": refit, "row": row})
    return out


def physics_checks(cal: Calibration, configs: Path, hw: Hardware) -> list[dict]:
    """Time each validation kernel against its roofline on ``hw``."""
    from simcore.spec.expr import evaluate
    out = []
    if not cal.physics:
        return out
    peak = hw.cores.aic * cal.roofline.cube_flops_per_cycle * hw.cores.clock_mhz * 1e6
    bw = cal.roofline.hbm_gbps * 1e9
    for check in cal.physics:
        path = find_config(Path(configs) / "kernels", check.kernel, "kernel")
        kernel = resolve_kernel(path, check.set)
        try:
            flops = evaluate(check.flops, kernel.params)
            nbytes = evaluate(check.bytes, kernel.params)
        except Exception as exc:  # an ExprError names the unknown name
            raise ConfigError(f"physics check '{check.name}': {exc}; flops and bytes are "
                              f"expressions over the kernel's params "
                              f"({', '.join(sorted(kernel.params))}).") from None
        tl = simulate(hw, compile_kernel(kernel, hw), kernel.options.runtime_options)
        compute_us, memory_us = flops / peak * 1e6, nbytes / bw * 1e6
        roof = max(compute_us, memory_us)
        eff = roof / tl.kernel_us
        out.append({"name": check.name, "kernel": check.kernel, "why": check.why,
                    "bound": "compute" if compute_us >= memory_us else "memory",
                    "kernel_us": tl.kernel_us, "roofline_us": roof,
                    "achieved_gbps": nbytes / tl.kernel_us / 1e3,
                    "achieved_tflops": flops / tl.kernel_us / 1e6,
                    "peak_tflops": peak / 1e12, "hbm_gbps": cal.roofline.hbm_gbps,
                    "efficiency": eff, "within": tuple(check.within),
                    "ok": check.within[0] <= eff <= check.within[1]})
    return out


@dataclass
class Validation:
    cal: Calibration
    cal_path: str
    quick: bool
    shipped: dict[str, float]       # parameter values of facts + overlay
    shipped_rows: list[dict]
    full: Fit                       # a fresh fit from the procedure's starts on every case
    free: Fit | None                # the same with no parameter held (None: none is held)
    loo: list[dict]
    physics: list[dict]
    overlay: str                    # the overlay's name, or '' when there is none
    budgets: tuple[int, int]        # evaluations of the fresh fit, of each refit
    unused: list[str]               # studies with documented figures the procedure omits
    held_shipped: list[dict] = field(default_factory=list)   # held-out cases, shipped model
    held_fit: list[dict] = field(default_factory=list)       # the same on the fresh fit
    race: Race | None = None        # the chip's race variants (hardware file, [race])
    held_free: list[dict] = field(default_factory=list)      # held-out cases, free fit
    held_loo: list[list[dict]] = field(default_factory=list)  # the same, per leave-one-out refit

    @property
    def failures(self) -> list[str]:
        lines = [f"shipped {p.path} = {self.shipped[p.path]:g} lies outside its bounds "
                 f"[{p.bounds[0]:g}, {p.bounds[1]:g}] (prior {p.prior:g}); refit with "
                 f"ptolab calibrate {self.cal_path}"
                 for p in self.cal.parameters
                 if not p.bounds[0] <= self.shipped[p.path] <= p.bounds[1]]
        lines += [f"fresh fit: {line}" for line in bound_failures(self.full)]
        lines += [f"shipped {row['case']} {m}: {row[m]:.1f} vs documented "
                  f"{row[f'documented_{m}']:g} ({_pct(row[m] / row[f'documented_{m}'] - 1)}), "
                  f"more than the {100 * TARGET:.0f} % the model aims for"
                  for row in self.shipped_rows for m in row["metrics"]
                  if abs(row[m] / row[f"documented_{m}"] - 1) > TARGET]
        lines += [f"held-out {row['case']} {m}: predicted {row[m]:.1f} vs documented "
                  f"{row[f'documented_{m}']:g} ({_pct(row[m] / row[f'documented_{m}'] - 1)}), "
                  f"more than the {100 * TARGET:.0f} % the model aims for"
                  for row in self.held_shipped for m in row["metrics"]
                  if abs(row[m] / row[f"documented_{m}"] - 1) > TARGET]
        lines += [f"physics check {c['name']}: roofline efficiency {c['efficiency']:.2f} "
                  f"outside [{c['within'][0]:g}, {c['within'][1]:g}]"
                  for c in self.physics if not c["ok"]]
        return lines

    @property
    def loo_on_bound(self) -> list[str]:
        """One line per parameter a leave-one-out refit pushed onto a bound: without that
        case the other figures want a value the sources rule out, which names a mechanism
        the case holds in check (not a failure of the shipped fit, so not a FAIL)."""
        return [f"leave-one-out refit without {e['case']}: {path} on its {side} bound "
                f"({value:g}, bound {bound:g})"
                for e in self.loo for path, side, value, bound in e["fit"].on_bound]

    @property
    def unconverged(self) -> list[str]:
        """One line per fit whose search stopped at its budget: its values, and what they
        predict, are where the search was, not what the figures ask for.  (A --quick run
        stops every fit early on purpose: it names none, and its tables mark none.)"""
        if self.quick:
            return []
        fits = [("fresh fit", self.full)] + ([("free fit", self.free)] if self.free else [])
        fits += [(f"leave-one-out refit without {e['case']}", e["fit"]) for e in self.loo]
        return [f"{name} stopped at its budget ({fit.evaluations} evaluations) before "
                f"converging: raise max_evaluations in {self.cal_path}"
                for name, fit in fits if not fit.converged]


def run_validation(cal: Calibration, cal_path: str, configs: Path, quick: bool = False) -> Validation:
    problem = Problem(cal, configs)
    shipped_hw = load_hardware(problem.hw_path)
    shipped = {p.path: value_at(shipped_hw, p.path) for p in cal.parameters}
    full_budget = min(cal.max_evaluations, 8) if quick else cal.max_evaluations
    loo_max = cal.loo_max_evaluations or cal.max_evaluations
    loo_budget = min(loo_max, 4) if quick else loo_max
    overlay = fit_overlay(problem.hw_path)
    listed = {s.study for s in cal.studies + cal.held_out}
    unused = sorted(name for name in documented_studies(Path(configs)) if name not in listed)
    free = None
    if len(cal.free) < len(cal.parameters):
        # what the held parameters would take if they were free: the evidence for holding them
        unheld = copy.copy(problem)
        unheld.cal = cal.model_copy(update={"parameters": [
            p.model_copy(update={"held": None}) for p in cal.parameters]})
        free = fit_problem(unheld, max_evaluations=full_budget)
    full = fit_problem(problem, max_evaluations=full_budget)
    loo = leave_one_out(problem, loo_budget)
    return Validation(cal, cal_path, quick, shipped, problem.measure({}, base=shipped_hw),
                      full, free, loo,
                      physics_checks(cal, configs, shipped_hw),
                      overlay.name if overlay.exists() else "", (full_budget, loo_budget),
                      unused, problem.measure({}, problem.held, base=shipped_hw),
                      problem.measure(full.values, problem.held), race=problem.hw.race,
                      held_free=problem.measure(free.values, problem.held) if free else [],
                      held_loo=[problem.measure(e["fit"].values, problem.held) for e in loo])


def documented_studies(configs: Path) -> list[str]:
    """Names of the studies whose stages document a metric the fit can score."""
    names = []
    for path in sorted((configs / "studies").glob("*")):
        if path.suffix not in (".yaml", ".yml", ".toml"):
            continue
        try:
            study = load_study(path)
        except ConfigError:
            continue   # a broken study is its own command's error, not the report's
        if any(m in stage.documented for stage in study.stages for m in METRICS):
            names.append(study.name)
    return names


def _pct(x: float) -> str:
    return f"{100 * x:+.1f} %"


def _cell(row: dict, m: str) -> str:
    """A simulated figure and its error; for a racing case the median and the race's range."""
    return f"{row[m]:.1f} ({_pct(row[m] / row[f'documented_{m}'] - 1)}){_race_range(row, m)}"


def _race_lines(cal: Calibration, race: Race | None) -> list[str]:
    racing = [s.study for s in cal.studies + cal.held_out if s.race]
    if not racing or race is None:
        return []
    return ["", f"Racing studies ({', '.join(racing)}) are measured once per race factor of "
            f"the hardware file ({', '.join(f'{f:g}' for f in race.factors)}, applied to "
            f"{', '.join(f'`{p}`' for p in race.paths)}) and scored by the median; "
            f"'race a-b' is the smallest and largest run. {race.why}"]


def _stage_order(rows: list[dict], key: str) -> str:
    """Stages of one study from the largest figure to the smallest, "=" between equal ones."""
    ranked = sorted(rows, key=lambda r: -r[key])
    text = ranked[0]["stage"] if ranked else ""
    for before, row in zip(ranked, ranked[1:]):
        text += (" = " if math.isclose(before[key], row[key], rel_tol=1e-9) else " > ") \
            + row["stage"]
    return text


def _same_order(rows: list[dict], m: str) -> bool:
    """Every two stages whose documented figures differ are predicted the same way round."""
    key = f"documented_{m}"
    return all((a[key] - b[key]) * (a[m] - b[m]) > 0
               for k, a in enumerate(rows) for b in rows[k + 1:] if a[key] != b[key])


def _held_out_section(v: Validation) -> list[str]:
    """Predictions for documented cases no fit has seen, and whether their order holds."""
    if not v.held_shipped:
        return []
    fit_rows = {r["case"]: r for r in v.held_fit}
    free_rows = {r["case"]: r for r in v.held_free}
    free = bool(v.held_free)
    lines = ["", "## Held-out cases", "",
             "Documented figures the procedure keeps out of every fit (`held_out`): the "
             "model predicts them as it would a user's next kernel, with the shipped values "
             "and with the fresh fit's" + (", and with the free fit's (nothing held): "
                                          "whether what the fitted figures ask for also "
                                          "predicts a kernel they never saw" if free else "")
             + ".", "",
             "| case | metric | documented | shipped (predicted) | fresh fit (predicted) |"
             + (" free fit (predicted) |" if free else ""),
             "|---|---|---:|---:|---:|" + ("---:|" if free else "")]
    for row in v.held_shipped:
        for m in row["metrics"]:
            doc = row[f"documented_{m}"]
            views = (row, fit_rows[row["case"]]) + ((free_rows[row["case"]],) if free else ())
            cells = [_cell(r, m) for r in views]
            lines.append(f"| {row['case']} | {m} | {doc:g} | " + " | ".join(cells) + " |")
    lines += ["", f"RMS log error of the held-out predictions: shipped "
              f"{_rms_log(v.held_shipped):.3f}, fresh fit {_rms_log(v.held_fit):.3f}"
              + (f", free fit {_rms_log(v.held_free):.3f}" if free else "") + ".", ""]
    for study in dict.fromkeys(r["study"] for r in v.held_shipped):
        for m in METRICS:
            rows = [r for r in v.held_shipped if r["study"] == study and m in r["metrics"]]
            if len(rows) < 2:
                continue
            documented, predicted = (_stage_order(rows, f"documented_{m}"),
                                     _stage_order(rows, m))
            verdict = "holds" if _same_order(rows, m) else "DIFFERS"
            lines.append(f"- {study} {m}, stages from slowest: documented {documented}; "
                         f"predicted {predicted} ({verdict})")
    return lines + _refit_spread(v) + _mechanism_section(v.held_shipped)


def refit_spread(v: Validation) -> list[dict]:
    """Per held-out figure, the smallest and largest prediction over every fit validate
    made (shipped, fresh, free and each leave-one-out refit): how far the figures' own
    uncertainty about the parameters moves the prediction, beside how far it is off.
    Nothing without leave-one-out refits: the span would then be two fits'."""
    if not v.held_loo:
        return []
    views = [v.held_shipped, v.held_fit, v.held_free, *v.held_loo]
    out = []
    for k, row in enumerate(v.held_shipped):
        for m in row["metrics"]:
            got = [rows[k][m] for rows in views if rows]
            out.append({"case": row["case"], "metric": m, "documented": row[f"documented_{m}"],
                        "low": round(float(min(got)), 4), "high": round(float(max(got)), 4),
                        "fits": len(got)})
    return out


def _refit_spread(v: Validation) -> list[str]:
    spread = refit_spread(v)
    if not spread:
        return []
    which = "the shipped values, the fresh fit" + (", the free fit" if v.held_free else "") \
        + " and each leave-one-case-out refit"
    lines = ["", f"Over {spread[0]['fits']} sets of fitted values ({which}; the first two "
             f"coincide when the shipped overlay is the fresh fit), each held-out figure's "
             f"predictions span:", "",
             "| case | metric | documented | lowest | highest | spread | error of the "
             "closest |", "|---|---|---:|---:|---:|---:|---:|"]
    for c in spread:
        doc, low, high = c["documented"], c["low"], c["high"]
        closest = min((low, high), key=lambda x: abs(math.log(x / doc)))
        inside = low <= doc <= high
        lines.append(f"| {c['case']} | {c['metric']} | {doc:g} | {low:.1f} | {high:.1f} | "
                     f"{_pct(high / low - 1)} | "
                     f"{'within' if inside else _pct(closest / doc - 1)} |")
    lines += ["", "A figure whose error is far outside this spread is not a matter of which "
              "values the documented figures allow: no fit the procedure makes reaches it, "
              "so what it misses is a mechanism."]
    return lines


PIPE_LABELS = {name: label for name, _, _, label in PIPE_SHARES}


def mechanism_checks(rows: list[dict]) -> list[dict]:
    """Each documented MECHANISMS figure of ``rows`` beside the model's.  A pipe's share is
    compared as its busy time on a core (share x kernel time, when the kernel time is
    documented too), so the error of the kernel time is not counted in it a second time."""
    out = []
    for row in rows:
        for m, (got, doc) in row.get("checks", {}).items():
            check = {"case": row["case"], "figure": m, "documented": doc,
                     "predicted": round(float(got), 6)}
            if m in row.get("sourced", {}):
                check["sourced"] = row["sourced"][m]
            if m in PIPE_LABELS and "documented_kernel_us" in row:
                check["documented_busy_us"] = round(doc * row["documented_kernel_us"], 4)
                check["predicted_busy_us"] = round(got * row["kernel_us"], 4)
            out.append(check)
    return out


def _source_cell(check: dict) -> str:
    return f"source: {check['sourced']}" if "sourced" in check else ""


def _mechanism_section(rows: list[dict]) -> list[str]:
    checks = mechanism_checks(rows)
    if not checks:
        return []
    lines = ["", "### What the held-out cases show of the mechanisms", "",
             "Documented figures of what the chip did, not how long it took, on the shipped "
             "model and never fitted: a pipe's busy time on a core (its busy share x the "
             "kernel time, so the kernel time's own error does not count twice) and the "
             "share of the reads that hit L2.  Where a held-out time is off, these say which "
             "part of the model it comes from.  A figure the hardware file takes a value "
             "from is marked 'source': it is no prediction.", "",
             "| case | figure | documented | predicted | predicted / documented (a rate: "
             "the difference) | source |",
             "|---|---|---:|---:|---:|---|"]
    for c in checks:
        if "documented_busy_us" in c:
            doc, got = c["documented_busy_us"], c["predicted_busy_us"]
            name = f"{PIPE_LABELS[c['figure']]} busy, us a core (share)"
            ratio = f"{got / doc:.2f}" if doc else "-"
            lines.append(f"| {c['case']} | {name} | {doc:.1f} ({100 * c['documented']:.1f} %) "
                         f"| {got:.1f} ({100 * c['predicted']:.1f} %) | {ratio} | "
                         f"{_source_cell(c)} |")
        else:
            doc, got = c["documented"], c["predicted"]
            name = PIPE_LABELS.get(c["figure"], "L2 hit rate")
            name += " share" if c["figure"] in PIPE_LABELS else ""
            lines.append(f"| {c['case']} | {name} | {100 * doc:.3g} % | {100 * got:.3g} % | "
                         f"{100 * (got - doc):+.3g} points | {_source_cell(c)} |")
    return lines


def fidelity_summary(v: Validation) -> dict:
    """What a report says of the model's fidelity (docs/fidelity.json): every documented
    figure as the shipped model predicts it, in the fit or held out of it, and the rms log
    errors the markdown gives."""
    def figures(rows: list[dict]) -> list[dict]:
        return [{"case": r["case"], "metric": m, "documented": r[f"documented_{m}"],
                 "predicted": round(float(r[m]), 4)} for r in rows for m in r["metrics"]]
    return {"hardware": v.cal.hardware, "procedure": v.cal_path, "quick": v.quick,
            "in_fit": figures(v.shipped_rows), "held_out": figures(v.held_shipped),
            "held_out_mechanisms": mechanism_checks(v.held_shipped),
            "held_out_refit_spread": refit_spread(v),
            "rms_log": {"in_fit": round(_rms_log(v.shipped_rows), 4),
                        "held_out": round(_rms_log(v.held_shipped), 4),
                        "leave_one_out": round(_rms_log([e["row"] for e in v.loo]), 4)}}


def _converged(v: Validation, fit: Fit) -> str:
    """'converged, ' or 'NOT converged, ' for the header; nothing for a --quick run."""
    if v.quick:
        return ""
    return "converged, " if fit.converged else "NOT converged, "


def _starts_text(cal: Calibration) -> str:
    st = cal.starts
    if st.count < 2:
        return "Every fit searches from the priors. "
    return (f"Every fit searches from the priors and from the procedure's other "
            f"{st.count - 1} deterministic starts (each prior times a factor drawn in "
            f"{st.spread[0]:g}-{st.spread[1]:g}x, seed {st.seed}) and takes the lowest "
            f"converged minimum inside every bound, unless one on a bound scores more than "
            f"{100 * st.bound_tolerance:g} % lower. ")


def render_fidelity(v: Validation) -> str:
    cal = v.cal
    quick = " --quick" if v.quick else ""
    model = f"{cal.hardware} facts + {v.overlay}" if v.overlay else f"{cal.hardware} facts"
    full_rows = {r["case"]: r for r in v.full.table}
    loo_rows = {e["case"]: e["row"] for e in v.loo}
    lines = [
        f"# Model fidelity: {cal.hardware}",
        "",
        f"Generated by `ptolab validate {v.cal_path}{quick}` from the procedure in "
        f"`{v.cal_path}`: do not edit.",
        "",
        f"Three views of the same documented figures: the model as shipped ({model}); a fresh "
        f"fit on every case, held parameters at their priors "
        f"({v.full.evaluations} of at most "
        f"{v.budgets[0]} evaluations, {_converged(v, v.full)}"
        f"score {v.full.score:.4f}; {start_summary(v.full)}); and, for each case, a refit "
        f"that never sees it (leave-one-case-out, at most {v.budgets[1]} "
        f"evaluations a start). " + _starts_text(cal) + "A fit has converged when its "
        f"pattern search's step falls below "
        f"x{math.exp(STEP_FLOOR):.3f} before its budget runs out. A case is one study stage "
        f"with its documented metrics. Errors are simulated / documented - 1.",
        *_race_lines(cal, v.race),
        "",
        "## Verdict",
        "",
    ]
    lines += [f"- FAIL: {f}" for f in v.failures] or ["- no parameter of the fresh fit ends "
                                                        "on a bound and every physics check "
                                                        "passes"]
    lines += [f"- NOT CONVERGED: {line}" for line in v.unconverged]
    lines += [f"- ON A BOUND: {line}" for line in v.loo_on_bound]
    lines += ["", "## Documented figures", ""]
    if v.unused:
        lines += [f"Studies with documented figures this procedure does not use: "
                  f"{', '.join(v.unused)}.", ""]
    free_rows = {r["case"]: r for r in v.free.table} if v.free else {}
    if v.free:
        lines += [f"'free fit': the fit with nothing held (score {v.free.score:.4f}"
                  + (", on a bound: " + ", ".join(f"`{path}` ({side})" for path, side, _, _
                                                  in v.free.on_bound) if v.free.on_bound
                     else ", no parameter on a bound")
                  + "): what the figures ask for when the sources do not hold it back.", ""]
    lines += [
              "| case | metric | documented | shipped | fresh fit (in-fit) | left out |"
              + (" free fit |" if v.free else ""),
              "|---|---|---:|---:|---:|---:|" + ("---:|" if v.free else "")]
    for row in v.shipped_rows:
        name = row["case"]
        for m in row["metrics"]:
            doc = row[f"documented_{m}"]
            views = (row, full_rows[name], loo_rows[name]) + ((free_rows[name],) if v.free
                                                              else ())
            cells = [_cell(r, m) for r in views]
            lines.append(f"| {name} | {m} | {doc:g} | " + " | ".join(cells) + " |")
    lines += _held_out_section(v)
    lines += ["", "## Parameters", "",
              "Bounds are 0.5x-2x of the prior unless a physical bound is stated. 'x prior' is "
              "a value over its prior; 'on bound' (fresh fit) is within 1 % of a bound.", "",
              "A held parameter stays at its prior in the fit; 'free fit' is the fit with "
              "nothing held, the evidence for holding it.", "",
              "| parameter | prior | bounds | shipped | x prior | fresh fit | x prior | "
              "within 0.5-2x (shipped/fit) | on bound | free fit (on bound) | source |",
              "|---|---:|---|---:|---:|---:|---:|---|---|---|---|"]
    hits = {path: side for path, side, _, _ in v.full.on_bound}
    free_hits = {path: side for path, side, _, _ in v.free.on_bound} if v.free else {}
    for p in cal.parameters:
        low, high = p.bounds
        value = v.full.values.get(p.path, p.prior)
        held = "held" if p.held else hits.get(p.path, "no")
        free = (f"{v.free.values[p.path]:g} ({free_hits.get(p.path, 'no')})" if v.free
                else "-")
        ratio = value / p.prior
        bound = f"{low:g} .. {high:g}" + (f" (physical: {p.physical_bound})"
                                            if p.physical_bound else "")
        within = "/".join("yes" if 0.5 <= r <= 2 else "NO"
                          for r in (v.shipped[p.path] / p.prior, ratio))
        lines.append(f"| `{p.path}` | {p.prior:g} | {bound} | {v.shipped[p.path]:g} | "
                     f"{v.shipped[p.path] / p.prior:.2f} | {value:g} | {ratio:.2f} | "
                     f"{within} | {held} | {free} | {p.source} |")
    held = [p for p in cal.parameters if p.held]
    if held:
        lines += ["", "Held at their priors, and why:", ""]
        lines += [f"- `{p.path}`: {p.held}" for p in held]
    lines += ["", "## Leave-one-case-out", "",
              "In-fit: the fresh fit on every case; left out: the refit without that case. "
              "A left-out error much larger than the in-fit one means the fit memorises the "
              "case rather than explaining it.", "",
              "'Moves most': the refit's values furthest from the fresh fit's (by ratio), "
              "the parameters the left-out case pins.", "",
              "| case | in-fit rms log error | left-out rms log error | refit score | "
              "refit evaluations | refit on bound | moves most |",
              "|---|---:|---:|---:|---:|---|---|"]
    for e in v.loo:
        name, refit = e["case"], e["fit"]
        hit = ", ".join(f"{path} ({side})" for path, side, _, _ in refit.on_bound) or "no"
        spent = f"{refit.evaluations}" + ("" if refit.converged or v.quick
                                          else " (budget, not converged)")
        moved = ", ".join(f"`{path}` {before:.4g} -> {after:.4g} ({after / before:.2f}x)"
                          for path, before, after in largest_moves(v.full.values, refit.values))
        lines.append(f"| {name} | {_rms_log([full_rows[name]]):.3f} | "
                     f"{_rms_log([e['row']]):.3f} | {refit.score:.4f} | {spent} | {hit} | "
                     f"{moved or 'none'} |")
    lines.append(f"| all cases | {_rms_log(list(full_rows.values())):.3f} | "
                 f"{_rms_log([e['row'] for e in v.loo]):.3f} | | | | |")
    lines += ["", "## Physics checks", ""]
    if v.physics:
        c0 = v.physics[0]
        lines += [f"Kernels the fit never sees, on the shipped model. Roofline time = "
                  f"max(flops / cube peak, bytes / HBM bandwidth), with cube peak "
                  f"{c0['peak_tflops']:.1f} TFLOPS ({cal.roofline.cube_source}; AIC count and "
                  f"clock from the hardware file) and HBM {c0['hbm_gbps']:g} GB/s "
                  f"({cal.roofline.hbm_source}). Efficiency = roofline time / simulated "
                  f"kernel time.", "",
                  "| check | kernel | bound by | kernel us | roofline us | achieved GB/s | "
                  "achieved TFLOPS | efficiency | expected | result |",
                  "|---|---|---|---:|---:|---:|---:|---:|---|---|"]
        for c in v.physics:
            lines.append(f"| {c['name']} | {c['kernel']} | {c['bound']} | {c['kernel_us']:.1f} | "
                         f"{c['roofline_us']:.1f} | {c['achieved_gbps']:.0f} | "
                         f"{c['achieved_tflops']:.1f} | {c['efficiency']:.3f} | "
                         f"{c['within'][0]:g} .. {c['within'][1]:g} | "
                         f"{'pass' if c['ok'] else 'FAIL'} |")
        lines += [""] + [f"- {c['name']}: {c['why']}" for c in v.physics]
    else:
        lines.append("No physics checks in the procedure.")
    return "\n".join(lines) + "\n"
