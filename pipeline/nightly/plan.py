"""The workflow plan, extended with the nightly study set.

The nightly studies may differ from ``configs/workflow.yaml``'s default ones.
Rather than copy the compile/simulate/parse rules, the nightly rules hand the
existing rules a plan that knows both sets: their input functions look studies
up in it, so a nightly-only study builds under ``results/<study>/<stage>/``
exactly like a default one.  ``pipeline.workflow`` is left as it is.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from simcore.spec.errors import ConfigError

from ..workflow import Plan, load_plan
from .config import NightlyConfig


def nightly_plan(configs: Path, results: str, nightly: NightlyConfig,
                 source: str = "configs/nightly.yaml") -> Plan:
    """A plan of just the nightly studies, validated as up front as the default ones."""
    try:
        return load_plan(Path(configs), {"studies": list(nightly.studies), "results": results})
    except ConfigError as exc:
        raise ConfigError(f"a study listed in {source} cannot be built: {exc}") from None


def with_studies(base: Plan, extra: Plan) -> Plan:
    """``base`` plus the studies of ``extra`` (a study in both is the same file)."""
    return replace(base, studies={**base.studies, **extra.studies})


def stage_dirs(plan: Plan) -> list[tuple[str, str, Path]]:
    """(study, stage, results/<study>/<stage>) for every stage, in study order."""
    return [(name, stage.name, Path(plan.results) / name / stage.name)
            for name, sp in plan.studies.items() for stage in sp.study.stages]
