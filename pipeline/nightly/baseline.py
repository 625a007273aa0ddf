"""``baselines/<study>.yaml``: one human-readable, diffable file per study.

Keys are sorted and each stage is one block, so a baseline update reviews like
any other change.  Dev-task rows are one line each (flow style) so a moved dev
task is a one-line diff.  The files are rewritten only by ``ptolab baseline
update``: the nightly reads them and never writes them.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from simcore.spec.errors import ConfigError

from ..emit.atomic import write_text
from ..workflow import StudyPlan
from . import findings as advisor
from .summary import stage_summary

FORMAT = 1


class _Row(dict):
    """A mapping written on one line."""


class _Dumper(yaml.SafeDumper):
    pass


def _represent_row(dumper: _Dumper, row: _Row):
    # a row reads best in its own field order (seq first), not alphabetically
    keep, dumper.sort_keys = dumper.sort_keys, False
    try:
        return dumper.represent_mapping("tag:yaml.org,2002:map", row, flow_style=True)
    finally:
        dumper.sort_keys = keep


_Dumper.add_representer(_Row, _represent_row)


def path_for(baselines: Path, study: str) -> Path:
    return Path(baselines) / f"{study}.yaml"


def missing_message(baselines: Path, study: str) -> str:
    return (f"no baseline for study '{study}' ({path_for(baselines, study)} does not exist). "
            f"Create it on purpose from a build of the current tree: "
            f"snakemake -c2 nightly_stages && ptolab baseline update --study {study}; "
            f"then review and commit the file.")


def build(sp: StudyPlan, results: Path, with_findings: bool = True) -> dict:
    """The baseline of one study, from its built stages under ``results``."""
    stages = {}
    for stage in sp.study.stages:
        stage_dir = Path(results) / sp.study.name / stage.name
        summary = stage_summary(stage_dir)
        if with_findings:
            found = advisor.recorded(advisor.stage_findings(stage_dir))
            if found is not None:
                summary["advisor"] = found
        stages[stage.name] = summary
    return {"format": FORMAT, "study": sp.study.name, "kernel": sp.study.kernel,
            "hardware": sp.study.hardware,
            "stage_order": [s.name for s in sp.study.stages], "stages": stages}


def dumps(baseline: dict, command: str) -> str:
    data = {**baseline, "stages": {
        name: {**s, **({"dev_task_spans": [_Row(r) for r in s["dev_task_spans"]]}
                       if "dev_task_spans" in s else {})}
        for name, s in baseline["stages"].items()}}
    header = (f"# Nightly baseline of study '{baseline['study']}' (docs/nightly.md).\n"
              f"# Written by `{command}` from the parsed results.\n"
              f"# Do not edit by hand: rerun that command on purpose and commit the diff.\n")
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=True, default_flow_style=False,
                     allow_unicode=True, width=100)
    return header + body


def write(path: Path, baseline: dict, command: str) -> None:
    write_text(Path(path), dumps(baseline, command))


def read(baselines: Path, study: str) -> dict:
    path = path_for(baselines, study)
    if not path.exists():
        raise ConfigError(missing_message(baselines, study))
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"the baseline is not valid YAML ({exc}). Regenerate it: "
                          f"ptolab baseline update --study {study}.", source=str(path)) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or "stages" not in data:
        raise ConfigError(f"not a format-{FORMAT} nightly baseline. Regenerate it: "
                          f"ptolab baseline update --study {study}.", source=str(path))
    return data


def check_layout(baseline: dict, sp: StudyPlan, path: Path) -> None:
    """A baseline must cover exactly the study's stages, or nothing can be compared."""
    have, want = set(baseline["stages"]), {s.name for s in sp.study.stages}
    if have != want:
        extra, missing = sorted(have - want), sorted(want - have)
        detail = "; ".join(filter(None, [
            f"stages without a baseline: {', '.join(missing)}" if missing else "",
            f"baseline stages no longer in the study: {', '.join(extra)}" if extra else ""]))
        raise ConfigError(f"the baseline does not match study '{sp.study.name}' ({detail}). "
                          f"If the study changed on purpose: snakemake -c2 nightly_stages && "
                          f"ptolab baseline update --study {sp.study.name}.", source=str(path))


def keep_swimlanes(sp: StudyPlan, results: Path, keep_dir: Path) -> None:
    """Copy each stage's swimlane beside the results, so the report can link both."""
    for stage in sp.study.stages:
        src = Path(results) / sp.study.name / stage.name / "run" / "merged_swimlane.json"
        if src.exists():
            dst = Path(keep_dir) / sp.study.name / stage.name / "merged_swimlane.json"
            write_text(dst, src.read_text(encoding="utf-8"))
