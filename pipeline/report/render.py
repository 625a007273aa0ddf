"""Render a study's report and the results index from parsed files.

Output is a pure function of the inputs (no clock, no host name, sorted JSON), so the
same parsed files give byte-identical HTML and Snakemake's reruns change nothing.
"""
from __future__ import annotations

import os
from pathlib import Path

import jinja2
from markupsafe import Markup

from simcore.spec.study import load_study

from ..emit.atomic import write_text
from . import charts, lanes, stages
from .advisor import advise
from .embed import script_json

ROOT = Path(__file__).resolve().parents[2] / "reports"
TEMPLATES = ROOT / "templates"
VIEWER = ROOT / "static" / "swimlane.js"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["script_json"] = script_json
    env.globals["legend"] = lanes.legend
    return env


def viewer_js() -> Markup:
    text = VIEWER.read_text(encoding="utf-8")
    # the script is inlined verbatim: it must never close its own element
    assert "</script" not in text.lower(), f"{VIEWER} contains '</script'"
    return Markup(text)


def _stage_row(stage, stage_dir: Path, report_dir: Path) -> dict:
    parsed = stage_dir / "parsed"
    tasks = stages.table(parsed, "tasks")
    busy, span = stages.core_busy(tasks, stages.table(parsed, "phases"))
    swimlane = stage_dir / "run" / "merged_swimlane.json"
    return {"name": stage.name, "description": stage.description, "knobs": dict(stage.set),
            "documented": dict(stage.documented),
            "metrics": stages.read_json(parsed / "metrics.json") or {},
            "tasks": tasks, "busy": busy, "span": span,
            "swimlane": Path(os.path.relpath(swimlane, report_dir)).as_posix(),
            "parsed": parsed}


def stage_rows(study, stages_dir: Path, report_dir: Path | None = None) -> list[dict]:
    """Every stage's metrics, knobs and speed-ups against the first and the previous stage."""
    stages_dir = Path(stages_dir)
    rows = [_stage_row(s, stages_dir / s.name, Path(report_dir or stages_dir))
            for s in study.stages]
    base = rows[0]["metrics"]
    for i, row in enumerate(rows):
        m, prev = row["metrics"], rows[i - 1] if i else None
        row["changed"] = stages.changed(prev["knobs"] if prev else None, row["knobs"])
        for key in ("kernel_us", "e2e_us"):
            row[f"{key}_vs_base"] = stages.speedup(base.get(key), m.get(key))
            row[f"{key}_vs_prev"] = (stages.speedup(prev["metrics"].get(key), m.get(key))
                                     if prev else None)
    return rows


def _details(row: dict, index: int) -> dict:
    """The heavy per-stage parts: swimlane data, analyze, PMU, pipe timeline, advice."""
    parsed = row["parsed"]
    out = {"lane_id": f"swimlane-data-{index}", "pipe_id": f"pipe-data-{index}",
           "lane_data": None, "pipe_data": None,
           "analyze": stages.analyze_rounds(parsed),
           "pmu": stages.pmu_summary(stages.table(parsed, "pmu")),
           "advice": advise(parsed.parent),
           "core_chart": charts.core_bars(row["busy"], row["span"]) if row["busy"] else None}
    if row["tasks"] is not None and row["tasks"].height:
        out["lane_data"] = lanes.payload(row["tasks"], stages.table(parsed, "topo"),
                                         stages.table(parsed, "phases"))
    pipes = stages.pipe_timeline(parsed)
    if pipes is not None:
        out["pipe_data"] = lanes.payload(pipes)
    return out


def render_study(study_path: Path, stages_dir: Path, out: Path) -> None:
    study = load_study(Path(study_path))
    rows = stage_rows(study, stages_dir, Path(out).parent)
    for i, row in enumerate(rows):
        row.update(_details(row, i))
    names = [r["name"] for r in rows]
    waterfall = charts.waterfall(names, [r["metrics"].get("kernel_us", 0.0) for r in rows],
                                 [r["metrics"].get("e2e_us", 0.0) for r in rows])
    sweep_charts = [(s, charts.sweep_chart(s)) for s in stages.sweeps(rows)]
    html = environment().get_template("study.html.j2").render(
        study=study, rows=rows, waterfall=waterfall, sweeps=sweep_charts,
        viewer_js=viewer_js())
    write_text(Path(out), html)


def _headline(study, results: Path) -> dict:
    rows = stage_rows(study, Path(results) / study.name, Path(results))
    best = min(rows, key=lambda r: r["metrics"].get("e2e_us", float("inf")))
    first = rows[0]["metrics"]
    return {"study": study, "rows": rows, "best": best, "link": f"{study.name}/report.html",
            "e2e_gain": stages.speedup(first.get("e2e_us"), best["metrics"].get("e2e_us")),
            "kernel_gain": stages.speedup(first.get("kernel_us"),
                                          best["metrics"].get("kernel_us"))}


def render_index(results: Path, study_paths: list[Path], out: Path) -> None:
    studies = sorted((load_study(Path(p)) for p in study_paths), key=lambda s: s.name)
    entries = [_headline(s, Path(results)) for s in studies]
    html = environment().get_template("index.html.j2").render(entries=entries)
    write_text(Path(out), html)
