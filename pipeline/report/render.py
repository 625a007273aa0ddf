"""Render a study's report and the results index from parsed files.

Output is a pure function of the inputs (no clock, no host name, sorted JSON), so the
same parsed files give byte-identical HTML and Snakemake's reruns change nothing.
"""
from __future__ import annotations

import os
from pathlib import Path

import jinja2
from markupsafe import Markup

from simcore.spec.errors import ConfigError
from simcore.spec.loader import read_mapping
from simcore.spec.study import find_config, load_study, load_workflow

from ..emit.atomic import write_text
from ..pipe_shares import PIPE_SHARES
from . import charts, fidelity, stages
from .embed import script_json

# graph, knobs, lanes and the advisor (polars, the kernel models) are imported where a study
# report needs them: the index, rendered after every report, needs none of them

ROOT = Path(__file__).resolve().parents[2] / "reports"
TEMPLATES = ROOT / "templates"
VIEWER = ROOT / "static" / "swimlane.js"


def _knob_text(value) -> str:
    from .knobs import value_text
    return value_text(value)


def _legend(data: dict) -> list[tuple[str, str]]:
    from .lanes import legend
    return legend(data)


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates kept in the system's temp folder (keyed by each template's source
    checksum, so an edited template compiles anew): compiling them is most of a short
    report job.  None where that folder cannot be used."""
    try:
        return jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError):
        return None


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             bytecode_cache=_bytecode_cache())
    env.filters["script_json"] = script_json
    env.filters["knob"] = _knob_text
    env.globals["legend"] = _legend
    return env


def viewer_js() -> Markup:
    text = VIEWER.read_text(encoding="utf-8")
    # the script is inlined verbatim: it must never close its own element
    assert "</script" not in text.lower(), f"{VIEWER} contains '</script'"
    return Markup(text)


def kernel_file(study, study_path: Path) -> Path | None:
    """configs/kernels/<kernel> beside the study's configs/studies/ folder, if there is one."""
    try:
        return find_config(Path(study_path).resolve().parent.parent / "kernels", study.kernel,
                           "kernel")
    except ConfigError:
        return None


def _stage_row(stage, stage_dir: Path, report_dir: Path, kernel: Path | None,
               varied: list[str]) -> dict:
    from . import graph, knobs
    parsed = stage_dir / "parsed"
    tasks = stages.table(parsed, "tasks")
    busy, span, chip = stages.core_busy(tasks, stages.table(parsed, "phases"))
    swimlane = stage_dir / "run" / "merged_swimlane.json"
    ran = knobs.resolve(kernel, stage.set) if kernel else None
    # the values the stage ran for every knob the study varies, defaults included
    values = {k: (ran.value(k) if ran else stage.set.get(k, "(default)")) for k in varied}
    return {"name": stage.name, "description": stage.description, "knobs": dict(stage.set),
            "documented": dict(stage.documented), "ran": values, "kernel_knobs": ran,
            "name_conflicts": knobs.name_conflicts(stage.name, values),
            "metrics": stages.read_json(parsed / "metrics.json") or {},
            "tasks": tasks, "busy": busy, "span": span, "chip": chip,
            "swimlane": Path(os.path.relpath(swimlane, report_dir)).as_posix(),
            "files": stages.run_links(stage_dir, report_dir),
            "graph": graph.read(parsed), "parsed": parsed}


def stage_rows(study, stages_dir: Path, report_dir: Path | None = None,
               kernel: Path | None = None) -> list[dict]:
    """Every stage's metrics, knobs and speed-ups against the first and the previous stage."""
    from . import graph
    stages_dir = Path(stages_dir)
    varied = sorted({k for s in study.stages for k in s.set})
    rows = [_stage_row(s, stages_dir / s.name, Path(report_dir or stages_dir), kernel, varied)
            for s in study.stages]
    for i, (stage, row) in enumerate(zip(study.stages, rows)):
        m, prev = row["metrics"], rows[i - 1] if i else None
        row["changed"] = stages.changed(prev["knobs"] if prev else None, row["knobs"])
        row["graph_diff"] = graph.diff(prev["graph"], row["graph"]) if prev else None
        # times compare only within a workload (a study running two problem sizes compares
        # each size's stages among themselves)
        row["workload"] = stage.workload
        same = [r for s, r in zip(study.stages[:i], rows) if s.workload == stage.workload]
        base, last = (same[0]["metrics"], same[-1]["metrics"]) if same else (None, None)
        row["new_workload"] = bool(i) and not same
        for key in ("kernel_us", "e2e_us"):
            row[f"{key}_vs_base"] = stages.speedup(base.get(key), m.get(key)) \
                if base is not None else (1.0 if not i else None)
            row[f"{key}_vs_prev"] = (stages.speedup(last.get(key), m.get(key))
                                     if last is not None else None)
            # two racing stages whose ranges overlap: the change may be the race alone
            row[f"{key}_vs_base_race"] = base is not None and stages.ranges_overlap(base, m, key)
            row[f"{key}_vs_prev_race"] = last is not None and stages.ranges_overlap(last, m, key)
    return rows


def _details(row: dict, index: int, source: "sources.KernelSource | None" = None) -> dict:
    """The heavy per-stage parts: swimlane data, analyze, PMU, pipe timeline, advice, and
    the source lines of the ops when the kernel came from a Python file."""
    from . import lanes, sources
    from .advisor import advise
    parsed = row["parsed"]
    analyze = stages.analyze_rounds(parsed)
    topo = stages.table(parsed, "topo")
    by_leaf = {}
    if source is not None:
        ops = stages.table(parsed, "ops")
        by_leaf = sources.leaf_lines(ops, source.name)
        sources.mark(source, ops)
    advice = advise(parsed.parent, row["kernel_knobs"])
    if by_leaf:
        sources.finding_sources(advice, by_leaf, source.name, row["tasks"], topo)
    out = {"lane_id": f"swimlane-data-{index}", "pipe_id": f"pipe-data-{index}",
           "lane_data": None, "pipe_data": None,
           "analyze": analyze, "phase_reading": [stages.phase_reading(r) for r in analyze],
           "pmu": stages.pmu_summary(stages.table(parsed, "pmu")),
           "advice": advice,
           "core_chart": charts.core_bars(row["busy"], row["span"]) if row["busy"] else None}
    if row["tasks"] is not None and row["tasks"].height:
        tasks, codes = row["tasks"], None
        if by_leaf:
            tasks, codes = sources.with_codes(tasks, topo, by_leaf, source.name)
        out["lane_data"] = lanes.payload(tasks, topo, stages.table(parsed, "phases"), codes)
    pipes = stages.pipe_timeline(parsed)
    if pipes is not None:
        out["pipe_data"] = lanes.payload(pipes)
    return out


def _metric(row: dict, key: str) -> float | None:
    value = row["metrics"].get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def _check_stages(study, stages_dir: Path) -> None:
    """A report of no parsed stage at all would be a page of blanks that looks rendered:
    refuse it (a stage missing beside others shows as not run)."""
    if not any((stages_dir / s.name / "parsed" / "metrics.json").is_file()
               for s in study.stages):
        where = "does not exist" if not stages_dir.is_dir() else "holds none of them"
        raise ConfigError(f"--stages-dir {stages_dir} {where}: a report needs "
                          f"<stage>/parsed/metrics.json for the stages of study "
                          f"'{study.name}' ({', '.join(s.name for s in study.stages)}); "
                          f"run `ptolab stage` or `snakemake` for them first.")


def render_study(study_path: Path, stages_dir: Path, out: Path,
                 kernel: Path | None = None) -> None:
    from . import graph, sources
    study = load_study(Path(study_path))
    _check_stages(study, Path(stages_dir))
    kernel = Path(kernel) if kernel else kernel_file(study, study_path)
    rows = stage_rows(study, stages_dir, Path(out).parent, kernel)
    source = sources.find(study, study_path, kernel)
    for i, row in enumerate(rows):
        row.update(_details(row, i, source))
        if source is not None and row["graph"] is not None:
            graph.add_sources(row["graph"], stages.table(row["parsed"], "ops"), source.name)
            if row["graph_diff"] is not None:
                graph.diff_sources(row["graph_diff"], rows[i - 1]["graph"], row["graph"])
    names = [r["name"] for r in rows]
    bars = charts.stage_bars(names, [_metric(r, "kernel_us") for r in rows],
                             [_metric(r, "e2e_us") for r in rows],
                             stages.race_ranges([r["metrics"] for r in rows]),
                             [s.workload for s in study.stages])
    sweep_charts = [(s, charts.sweep_chart(s)) for s in stages.sweeps(rows)]
    html = environment().get_template("study.html.j2").render(
        study=study, rows=rows, stage_bars=bars, sweeps=sweep_charts, source=source,
        model=fidelity.for_hardware(study.hardware),
        raced=any(stages.race_range(r["metrics"], "kernel_us") for r in rows),
        phase_columns=stages.PHASE_COLUMNS, viewer_js=viewer_js(),
        pipe_shares=[(name, label) for name, _, _, label in PIPE_SHARES])
    write_text(Path(out), html)


def _headline(study, results: Path) -> dict:
    """A study's first and best stage (by e2e_us), from each stage's parsed/metrics.json.

    A racing study's stages are compared by their race medians, not their single runs
    (one draw each), and a speed-up whose two race ranges overlap is marked as within the
    race, as the study report marks it."""
    # the first stage's workload only: stages of another problem size are no candidates
    rows = [{"name": s.name, "metrics": stages.read_json(
                Path(results) / study.name / s.name / "parsed" / "metrics.json") or {}}
            for s in study.stages if s.workload == study.stages[0].workload]
    raced = bool(rows) and all(stages.race_range(r["metrics"], "e2e_us") for r in rows)

    def time(metrics: dict, key: str):
        return metrics.get(f"{key}_race_median") if raced else metrics.get(key)

    timed = [r for r in rows if isinstance(time(r["metrics"], "e2e_us"), (int, float))]
    best = min(timed, key=lambda r: time(r["metrics"], "e2e_us")) if timed else rows[0]
    first = rows[0]["metrics"]
    shown = {k: {"first": time(first, k), "best": time(best["metrics"], k),
                 "gain": stages.speedup(time(first, k), time(best["metrics"], k)),
                 "within_race": raced and best is not rows[0]
                 and stages.ranges_overlap(first, best["metrics"], k)}
             for k in ("kernel_us", "e2e_us")}
    return {"study": study, "rows": rows, "best": best, "link": f"{study.name}/report.html",
            "built": (Path(results) / study.name / "report.html").exists(),
            "raced": raced, "times": shown,
            "e2e_gain": shown["e2e_us"]["gain"], "kernel_gain": shown["kernel_us"]["gain"]}


def _build_targets(study_paths: list[Path]) -> dict[str, str] | None:
    """Per study, the snakemake target that builds it: the workflow file beside the study
    configs names the default target's, configs/nightly.yaml the nightly target's.  None
    when there is no workflow file to tell."""
    for p in study_paths:
        configs = Path(p).resolve().parent.parent
        if not (configs / "workflow.yaml").is_file():
            continue
        targets = {}
        try:
            if (configs / "nightly.yaml").is_file():
                nightly = read_mapping(configs / "nightly.yaml").get("studies") or []
                targets.update((str(n), "snakemake nightly") for n in nightly)
            targets.update((n, "snakemake") for n in load_workflow(configs / "workflow.yaml")
                           .studies)
        except ConfigError:
            return None
        return targets
    return None


def render_index(results: Path, study_paths: list[Path], out: Path) -> None:
    """Studies in the order given (the workflow file's), each once; the nightly report
    is linked when one has been written."""
    studies, seen = [], set()
    for p in study_paths:
        study = load_study(Path(p))
        if study.name not in seen:
            seen.add(study.name)
            studies.append(study)
    entries = [_headline(s, Path(results)) for s in studies]
    targets = _build_targets(study_paths)
    for e in entries:
        # what builds a study not built yet (None: a study neither file names)
        e["build"] = "snakemake" if targets is None else targets.get(e["study"].name)
    nightly = (Path(results) / "nightly" / "report.html").exists()
    html = environment().get_template("index.html.j2").render(entries=entries, nightly=nightly)
    write_text(Path(out), html)
