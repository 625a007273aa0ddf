"""``configs/nightly.yaml``: which studies the nightly checks, and how much change is allowed.

Every metric of metrics.json has a built-in threshold; the file only states what
differs from it.  Times may drift by 2 % before they count, counts must match
exactly, because in a deterministic model a different count is a different
program.  A threshold can be written in full or as a shorthand: ``exact`` or a
percentage such as ``"5%"``.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from simcore.spec.base import Strict
from simcore.spec.errors import ConfigError
from simcore.spec.loader import load
from simcore.spec.study import NAME

from ..pipe_shares import PIPE_SHARE_NAMES

DEFAULT_PATH = Path("configs") / "nightly.yaml"


class Threshold(Strict):
    """How far a metric may move from its baseline before the nightly flags it.

    ``exact``: any difference counts.  Otherwise the change counts when it is
    beyond every bound given (``relative`` as a fraction of the baseline value,
    ``absolute`` in the metric's unit).  ``worse`` says which direction is a
    regression; a change beyond the bound the other way is an improvement.
    """

    exact: bool = False
    relative: float | None = Field(None, ge=0)
    absolute: float | None = Field(None, ge=0)
    worse: Literal["higher", "lower", "any"] = "any"

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            text = data.strip()
            if text == "exact":
                return {"exact": True}
            match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*%", text)
            if match:
                return {"relative": float(match.group(1)) / 100}
            raise ValueError("a threshold written as text must be 'exact' or a percentage "
                             "such as '2%'; otherwise give a mapping with exact, relative, "
                             "absolute and worse")
        return data

    @model_validator(mode="after")
    def _one_kind(self) -> "Threshold":
        if self.exact and (self.relative is not None or self.absolute is not None):
            raise ValueError("'exact: true' cannot be combined with 'relative' or 'absolute'")
        if not self.exact and self.relative is None and self.absolute is None:
            raise ValueError("give 'exact: true', or 'relative' and/or 'absolute'")
        return self

    def describe(self) -> str:
        if self.exact:
            return "exact"
        parts = []
        if self.relative is not None:
            parts.append(f"{self.relative * 100:g} %")
        if self.absolute is not None:
            parts.append(f"±{self.absolute:g}")
        return " and ".join(parts)


def _t(**kw) -> Threshold:
    return Threshold(**kw)


# The metrics of metrics.json (plus loop_bodies, which compile.json adds) and the
# built-in thresholds.  Times and traffic regress upwards, utilization and hit
# rate downwards; counts and identities must not move at all.
BUILTIN: dict[str, Threshold] = {
    "kernel_us": _t(relative=0.02, worse="higher"),
    "e2e_us": _t(relative=0.02, worse="higher"),
    "aicore_utilization": _t(relative=0.02, worse="lower"),
    "root_calls": _t(exact=True),
    "loop_bodies": _t(exact=True),
    "dev_tasks": _t(exact=True),
    "leaf_functions": _t(exact=True),
    "leaf_tasks": _t(exact=True),
    "aic_tasks": _t(exact=True),
    "aiv_tasks": _t(exact=True),
    "hbm_read_bytes": _t(relative=0.02, worse="higher"),
    "hbm_write_bytes": _t(relative=0.02, worse="higher"),
    # a rate near zero makes relative change meaningless, so it is absolute (2 points)
    "l2_hit_rate": _t(absolute=0.02, worse="lower"),
    "flops": _t(exact=True),
    # a pipe's busy share (msprof's PipeUtilization ratios): a shift either way moves the
    # balance of the pipes, so 2 points in either direction
    **{name: _t(absolute=0.02, worse="any") for name in PIPE_SHARE_NAMES},
    "workspace_bytes": _t(exact=True),
    "hardware": _t(exact=True),
    "kernel": _t(exact=True),
    # a racing stage (a study with race: true) also reports its times over the chip's race
    # variants; the median is its prediction, the smallest and largest run its range
    "race_runs": _t(exact=True),
    **{f"{m}_race_{k}": _t(relative=0.02, worse="higher")
       for m in ("kernel_us", "e2e_us") for k in ("median", "min", "max")},
}
KNOWN_METRICS = tuple(BUILTIN)
TOLERANCE_FIELDS = ("exact", "relative", "absolute")


class NightlyConfig(Strict):
    studies: list[str] = Field(min_length=1)
    baselines: str = "baselines"       # folder of baselines/<study>.yaml, relative to the project
    thresholds: dict[str, Threshold] = Field(default_factory=dict)
    # metrics that no built-in or configured threshold names (a metric added later)
    default: Threshold = Field(default_factory=lambda: _t(relative=0.02))
    fail_on_improvement: bool = False  # true: an improvement beyond threshold also exits 1
    trend: list[str] = Field(default_factory=lambda: ["kernel_us", "e2e_us"], min_length=1)
    trend_runs: int = Field(30, ge=2, le=1000)   # how many earlier runs the chart shows

    @field_validator("studies")
    @classmethod
    def _studies(cls, studies: list[str]) -> list[str]:
        for name in studies:
            if not re.fullmatch(NAME, name):
                raise ValueError(f"study name {name!r} is not a valid study name")
        dupes = sorted({s for s in studies if studies.count(s) > 1})
        if dupes:
            raise ValueError(f"studies listed twice: {', '.join(dupes)}; list each once")
        return studies

    @field_validator("thresholds", mode="before")
    @classmethod
    def _known(cls, thresholds: Any) -> Any:
        if isinstance(thresholds, dict):
            unknown = sorted(k for k in thresholds if k not in BUILTIN)
            if unknown:
                raise ValueError(f"unknown metric(s) {', '.join(unknown)}; allowed metrics "
                                 f"are {', '.join(KNOWN_METRICS)}")
        return thresholds

    @field_validator("trend")
    @classmethod
    def _trend(cls, trend: list[str]) -> list[str]:
        numeric = [m for m in KNOWN_METRICS if m not in ("hardware", "kernel")]
        bad = [m for m in trend if m not in numeric]
        if bad:
            raise ValueError(f"cannot chart {', '.join(bad)}; allowed metrics are "
                             f"{', '.join(numeric)}")
        return trend

    def threshold(self, metric: str) -> Threshold:
        """The configured threshold, filled in from the built-in one.

        Giving any of exact/relative/absolute replaces the built-in tolerance as
        a whole (so ``dev_tasks: 5%`` is not also exact); ``worse`` falls back
        to the built-in direction, so ``kernel_us: 5%`` still regresses upwards.
        """
        base = BUILTIN.get(metric, self.default)
        given = self.thresholds.get(metric)
        if given is None:
            return base
        fields = {k: getattr(given, k) for k in TOLERANCE_FIELDS}
        worse = given.worse if "worse" in given.model_fields_set else base.worse
        return Threshold(**fields, worse=worse)


def load_nightly(path: Path = DEFAULT_PATH) -> NightlyConfig:
    """Read and check the nightly config; a missing file says what to create."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"the nightly config '{path}' does not exist. Create it with at least "
                          f"'studies: [<study>, ...]' (see docs/nightly.md).", source=str(path))
    return load(NightlyConfig, path, "nightly config")
