"""The nightly check as one call: compare, record, render, decide the exit code.

Order matters for "could not run" (exit 2): every baseline and every stage's
results are read before anything is written, so a missing baseline leaves no
half-made report and no history entry behind.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from simcore.spec.study import load_workflow

from ..emit.atomic import write_json, write_text
from ..workflow import Plan
from . import baseline as bl
from . import history
from .compare import (GONE, IMPROVEMENT, RANK, REGRESSION, WITHIN, Change, Evidence,
                      compare_metrics, evidence)
from .config import NightlyConfig, load_nightly
from .findings import Findings, stage_findings
from .plan import nightly_plan
from .render import render_report
from .summary import sha256, stage_summary

EXIT_OK, EXIT_REGRESSION, EXIT_COULD_NOT_RUN = 0, 1, 2


@dataclass
class StageResult:
    study: str
    stage: str
    order: int                       # position in the nightly set, to break ties stably
    changes: list[Change]
    unchanged: int
    evidence: list[Evidence]
    findings: Findings
    baseline_findings: list[dict] | None
    links: dict = field(default_factory=dict)

    @property
    def status(self) -> str:
        return min((c.status for c in self.changes), key=RANK.get, default="unchanged")

    @property
    def flagged(self) -> list[Change]:
        return [c for c in self.changes if c.status in (REGRESSION, GONE, IMPROVEMENT)]

    @property
    def score(self) -> float:
        """How far the stage's worst kind of change moved (regressions outrank improvements)."""
        worst = [c for c in self.flagged if RANK[c.status] == RANK[self.status]]
        return max((c.score for c in worst), default=0.0)

    @property
    def name(self) -> str:
        return f"{self.study}/{self.stage}"


@dataclass
class Outcome:
    exit_code: int
    run_id: str
    summary: str
    results: list[StageResult]
    report: Path


def _links(results: Path, study: str, stage: str, recorded_sha: str | None) -> dict:
    """Paths relative to results/nightly/, where the report lives."""
    nightly = results / "nightly"
    current = results / study / stage / "run" / "merged_swimlane.json"
    kept = nightly / "baseline_runs" / study / stage / "merged_swimlane.json"
    links = {"current": os.path.relpath(current, nightly) if current.exists() else None,
             "baseline": None,
             "study_report": os.path.relpath(results / study / "report.html", nightly)
             + f"#stage-{stage}"}
    # link the kept baseline swimlane only if it is the run the baseline was taken from
    if kept.exists() and recorded_sha and sha256(kept) == recorded_sha:
        links["baseline"] = os.path.relpath(kept, nightly)
    return links


def compare_study(cfg: NightlyConfig, plan: Plan, name: str, base: dict, start: int,
                  results: Path) -> list[StageResult]:
    out = []
    for i, stage in enumerate(plan.study(name).study.stages):
        stage_dir = results / name / stage.name
        old, new = base["stages"][stage.name], stage_summary(stage_dir)
        changes, unchanged = compare_metrics(old.get("metrics", {}), new["metrics"], cfg)
        moved = evidence(old, new) if changes else []
        out.append(StageResult(name, stage.name, start + i, changes, unchanged, moved,
                               stage_findings(stage_dir), old.get("advisor"),
                               _links(results, name, stage.name, old.get("swimlane_sha256"))))
    return out


def verdict(results: list[StageResult], cfg: NightlyConfig) -> int:
    bad = {REGRESSION, GONE} | ({IMPROVEMENT} if cfg.fail_on_improvement else set())
    return EXIT_REGRESSION if any(c.status in bad for r in results for c in r.changes) \
        else EXIT_OK


def _fmt(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _describe(r: StageResult, c: Change) -> str:
    rel = f", {c.relative * 100:+.1f} %" if c.relative is not None and abs(c.relative) != \
        float("inf") else ""
    return f"{r.name} {c.metric} {_fmt(c.old)} → {_fmt(c.new)}{rel} (limit {c.threshold})"


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"


def summary_paragraph(run_id: str, code: int, results: list[StageResult], report: Path,
                      studies: list[str]) -> str:
    """One paragraph for a CI log: verdict, counts, the worst changes, where to look."""
    by = {s: [r for r in results if r.status == s] for s in RANK}
    regressed = by[REGRESSION] + by[GONE]
    word = "REGRESSION" if code == EXIT_REGRESSION else "OK"
    text = (f"ptolab nightly run {run_id}: {word}. {_n(len(results), 'stage')} of "
            f"{_n(len(studies), 'study', 'studies')} ({', '.join(studies)}) compared with "
            f"their baselines: "
            f"{len(regressed)} regressed, {len(by[IMPROVEMENT])} improved beyond threshold, "
            f"{len(by[WITHIN])} changed within threshold, {len(by['unchanged'])} unchanged.")
    worst = [_describe(r, c) for r in results for c in r.flagged
             if c.status in (REGRESSION, GONE)][:3]
    if worst:
        text += " Worst: " + "; ".join(worst) + "."
    return text + f" Report: {report}"


def history_stages(results: list[StageResult], base_metrics: dict) -> dict:
    """What a history entry keeps: numeric metrics now and in the baseline, per stage."""
    out = {}
    for r in results:
        old = base_metrics[r.name]
        new = {c.metric: c.new for c in r.changes}
        current = {**old, **new}
        out[r.name] = {"status": r.status,
                       "metrics": {k: v for k, v in sorted(current.items())
                                   if isinstance(v, (int, float)) and not isinstance(v, bool)},
                       "baseline": {k: v for k, v in sorted(old.items())
                                    if isinstance(v, (int, float)) and not isinstance(v, bool)}}
    return out


def run_nightly(configs: Path = Path("configs"), results: Path | None = None,
                run_id: str | None = None) -> Outcome:
    """Compare the built nightly studies with their baselines and write the report."""
    configs = Path(configs)
    cfg = load_nightly(configs / "nightly.yaml")
    results = Path(results if results is not None else
                   load_workflow(configs / "workflow.yaml").results)
    plan = nightly_plan(configs, str(results), cfg)
    baselines = {}
    for name in cfg.studies:
        baselines[name] = bl.read(Path(cfg.baselines), name)
        bl.check_layout(baselines[name], plan.study(name), bl.path_for(Path(cfg.baselines), name))
    stage_results: list[StageResult] = []
    for name in cfg.studies:
        stage_results += compare_study(cfg, plan, name, baselines[name], len(stage_results),
                                       results)
    stage_results.sort(key=lambda r: (RANK[r.status], -r.score, -len(r.flagged), r.order))
    code = verdict(stage_results, cfg)
    base_metrics = {f"{n}/{s}": st.get("metrics", {})
                    for n, b in baselines.items() for s, st in b["stages"].items()}
    nightly_dir = results / "nightly"
    run_id, entries = history.record(nightly_dir / "history", run_id,
                                     "regression" if code else "ok",
                                     history_stages(stage_results, base_metrics))
    report = nightly_dir / "report.html"
    text = summary_paragraph(run_id, code, stage_results, report, list(cfg.studies))
    write_text(report, render_report(cfg, run_id, code, text, stage_results,
                                     entries[-cfg.trend_runs:]))
    write_json(nightly_dir / "status.json", {
        "exit_code": code, "run": run_id, "verdict": "regression" if code else "ok",
        "summary": text, "stages": [{"study": r.study, "stage": r.stage, "status": r.status,
                                     "flagged": [c.metric for c in r.flagged]}
                                    for r in stage_results]})
    write_text(nightly_dir / "summary.txt", text + "\n")
    return Outcome(code, run_id, text, stage_results, report)
