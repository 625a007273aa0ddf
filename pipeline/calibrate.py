"""Fit a hardware file's free overhead parameters to a study's documented figures.

The procedure is data, not code: a calibration file names the study (whose
stages carry ``documented`` figures), the hardware to fit, the metrics to match
and the parameters to fit with their bounds.  Each stage is compiled once: a
Program holds hardware-independent work that the machine prices, so every
evaluation only re-simulates the stages with trial parameters and scores the
sum of squared log-ratios between simulated and documented figures.  A bounded,
deterministic pattern search in log space, started from the current values
(facts plus the last fit), minimises the score; the fitted values go to the
hardware's generated overlay (``<name>.fit.toml``, one provenance header),
never into the facts file people write.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from pydantic import Field, ValidationError

from simcore.compiler import compile_kernel
from simcore.compiler.limits import Limits
from simcore.machine import simulate
from simcore.spec.base import Strict
from simcore.spec.errors import ConfigError
from simcore.spec.hardware import Hardware, dotted_values, fit_overlay, load_hardware
from simcore.spec.loader import load, read_mapping
from simcore.spec.study import find_config, load_study

from .emit.atomic import write_text
from .runner import resolve_kernel


class Parameter(Strict):
    path: str = Field(pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")   # e.g. aicpu.init_us
    low: float = Field(gt=0)
    high: float = Field(gt=0)


class Calibration(Strict):
    study: str
    hardware: str
    metrics: list[str] = Field(default_factory=lambda: ["kernel_us", "e2e_us"])
    parameters: list[Parameter] = Field(min_length=1)
    max_evaluations: int = Field(300, ge=1, le=100000)


@dataclass
class Fit:
    values: dict[str, float]
    score: float
    evaluations: int
    table: list[dict]


def _get(hw: Hardware, path: str) -> float:
    node = hw.model_dump()
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"parameter '{path}' is not a field of the hardware file "
                              f"(no '{part}' there); use a dotted path such as "
                              f"aicpu.init_us.")
        node = node[part]
    if not isinstance(node, (int, float)):
        raise ConfigError(f"parameter '{path}' is not a number in the hardware file.")
    return float(node)


def with_values(hw: Hardware, values: dict[str, float]) -> Hardware:
    """A copy of ``hw`` with dotted-path fields replaced (validated again)."""
    data = hw.model_dump()
    for path, value in values.items():
        node = data
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return Hardware.model_validate(data)


def _check_free(hw: Hardware, p: Parameter) -> None:
    """A fittable parameter exists and prices the work; it never changes the mapping."""
    _get(hw, p.path)
    for bound in (p.low, p.high):
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


class Problem:
    def __init__(self, cal: Calibration, configs: Path):
        self.cal = cal
        study_path = find_config(configs / "studies", cal.study, "study")
        self.study = load_study(study_path)
        self.hw_path = find_config(configs / "hardware", cal.hardware, "hardware")
        self.hw = load_hardware(self.hw_path)
        kernel_path = find_config(configs / "kernels", self.study.kernel, "kernel")
        self.stages = [s for s in self.study.stages if all(m in s.documented for m in cal.metrics)]
        if not self.stages:
            raise ConfigError(f"no stage of study '{cal.study}' documents all of "
                              f"{cal.metrics}; add 'documented' figures to its stages.",
                              source=str(study_path))
        for p in cal.parameters:
            _check_free(self.hw, p)
        kernels = [(stage, resolve_kernel(kernel_path, stage.set)) for stage in self.stages]
        self.runs = [(stage, kernel, compile_kernel(kernel, self.hw)) for stage, kernel in kernels]

    def measure(self, values: dict[str, float]) -> list[dict]:
        hw = with_values(self.hw, values)
        rows = []
        for stage, kernel, program in self.runs:
            tl = simulate(hw, program, kernel.options.runtime_options)
            got = {"kernel_us": tl.kernel_us, "e2e_us": tl.e2e_us}
            rows.append({"stage": stage.name, **{f"{m}": got[m] for m in self.cal.metrics},
                         **{f"documented_{m}": stage.documented[m] for m in self.cal.metrics}})
        return rows

    def score(self, values: dict[str, float]) -> float:
        rows = self.measure(values)
        return sum(math.log(r[m] / r[f"documented_{m}"]) ** 2
                   for r in rows for m in self.cal.metrics)


def compass_search(f, x0: np.ndarray, low: np.ndarray, high: np.ndarray, max_evals: int):
    """Deterministic pattern search in log space.

    Try each parameter up and down by ``step``; keep any move that improves the
    score and repeat it while it keeps improving; halve the step when no move
    helps.  Robust to the small steps a discrete-event simulation puts in the
    score, where gradient-like methods stall.
    """
    x, best = np.clip(x0, low, high), f(np.clip(x0, low, high))
    evals, step = 1, 0.7
    while evals < max_evals and step > 0.005:
        improved = False
        for i in range(len(x)):
            for sign in (1.0, -1.0):
                while evals < max_evals:
                    trial = x.copy()
                    trial[i] = np.clip(trial[i] + sign * step, low[i], high[i])
                    if trial[i] == x[i]:
                        break
                    score = f(trial)
                    evals += 1
                    if score >= best:
                        break
                    x, best, improved = trial, score, True
        if not improved:
            step /= 2
    return x, best, evals


def fit(cal: Calibration, configs: Path) -> tuple[Fit, Problem]:
    problem = Problem(cal, configs)
    names = [p.path for p in cal.parameters]
    low = np.log([p.low for p in cal.parameters])
    high = np.log([p.high for p in cal.parameters])
    start = np.clip(np.log([max(_get(problem.hw, n), 1e-9) for n in names]), low, high)
    objective = lambda x: problem.score(dict(zip(names, np.exp(x))))
    best, score, evals = compass_search(objective, start, low, high, cal.max_evaluations)
    values = {n: float(f"{v:.4g}") for n, v in zip(names, np.exp(best))}
    return Fit(values, problem.score(values), evals, problem.measure(values)), problem


def stage_lines(table: list[dict], metrics: list[str]) -> list[str]:
    """One line per stage: simulated vs documented figure of every metric."""
    return [f"{row['stage']}: " + "  ".join(
        f"{m} {row[m]:.1f} (documented {row['documented_' + m]:g}, "
        f"{100 * (row[m] / row['documented_' + m] - 1):+.1f}%)" for m in metrics)
        for row in table]


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
    header = [
        f"# Fitted values for {facts_path.name}, generated by ptolab calibrate: do not edit.",
        "# The loader merges them over the facts file, each replacing the value of its key.",
        f"# procedure: {cal_path} (bounded pattern search in log space, bounds in that file)",
        f"# command: ptolab calibrate {cal_path}",
        f"# date: {date}",
        f"# data: study {cal.study}, documented {' and '.join(cal.metrics)} of "
        f"{len(fit.table)} stages",
        f"# score: {fit.score:.4f} (sum of squared log-ratios, simulated vs documented)",
        *(f"#   {line}" for line in stage_lines(fit.table, cal.metrics)),
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
    overlay = fit_overlay(facts_path)
    write_text(overlay, render_fit(facts_path, values, cal_path, cal, fit, date or fit_date()))
    return overlay


def load_calibration(path: Path) -> Calibration:
    return load(Calibration, path, "calibration")
