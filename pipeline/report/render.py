"""Render a study's report and the results index from parsed files."""
from __future__ import annotations

import json
from pathlib import Path

import jinja2
import polars as pl

from simcore.spec.study import load_study

from ..emit.atomic import write_text
from .charts import grouped_bars

TEMPLATES = Path(__file__).resolve().parents[2] / "reports" / "templates"


def environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                              autoescape=jinja2.select_autoescape(["html", "j2"]),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def _speedup(base: float, value: float) -> float | None:
    return base / value if value else None


def stage_rows(study, stages_dir: Path) -> list[dict]:
    rows = []
    for stage in study.stages:
        parsed = Path(stages_dir) / stage.name / "parsed"
        m = json.loads((parsed / "metrics.json").read_text(encoding="utf-8"))
        busy = []
        if (parsed / "tasks.parquet").exists():
            tasks = pl.read_parquet(parsed / "tasks.parquet")
            busy = (tasks.group_by(["core_type", "core"]).agg(pl.col("dur_us").sum())
                    .sort("core").rows(named=True))
        rows.append({"name": stage.name, "description": stage.description,
                     "knobs": stage.set, "metrics": m, "busy": busy,
                     "swimlane": f"{stage.name}/run/merged_swimlane.json"})
    base = rows[0]["metrics"]
    for i, row in enumerate(rows):
        m, prev = row["metrics"], rows[i - 1]["metrics"] if i else None
        row["kernel_vs_base"] = _speedup(base["kernel_us"], m["kernel_us"])
        row["e2e_vs_base"] = _speedup(base["e2e_us"], m["e2e_us"])
        row["e2e_vs_prev"] = _speedup(prev["e2e_us"], m["e2e_us"]) if prev else None
    return rows


def render_study(study_path: Path, stages_dir: Path, out: Path) -> None:
    study = load_study(Path(study_path))
    rows = stage_rows(study, stages_dir)
    chart = grouped_bars([r["name"] for r in rows],
                         [("kernel_us", "#4c78a8", [r["metrics"]["kernel_us"] for r in rows]),
                          ("e2e_us", "#f58518", [r["metrics"]["e2e_us"] for r in rows])],
                         y_label="time (us)")
    html = environment().get_template("study.html.j2").render(study=study, rows=rows,
                                                              chart=chart)
    write_text(Path(out), html)


def render_index(results: Path, study_paths: list[Path], out: Path) -> None:
    entries = []
    for path in study_paths:
        study = load_study(Path(path))
        rows = stage_rows(study, Path(results) / study.name)
        best = min(rows, key=lambda r: r["metrics"]["e2e_us"])
        entries.append({"study": study, "rows": rows, "best": best,
                        "link": f"{study.name}/report.html"})
    html = environment().get_template("index.html.j2").render(entries=entries)
    write_text(Path(out), html)
