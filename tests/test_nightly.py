"""Nightly regression reports.

The end-to-end tests build one scratch project with the real `snakemake` and
`ptolab`: the shipped multi_stitch study on dav_2201 plus a scratch study on
dav_3510 with one stage that pins its TileShape.  That mix is what lets a
perturbation show that the nightly flags *exactly* the stages it affects:
a dav_2201 parameter touches multi_stitch only, and the kernel's default
TileShape touches every stage except the pinned one.
"""
import json
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from pipeline.cli import main
from pipeline.nightly.compare import (IMPROVEMENT, REGRESSION, WITHIN, classify,
                                      compare_metrics, dev_task_evidence)
from pipeline.nightly.config import NightlyConfig, load_nightly
from pipeline.nightly.findings import stage_findings
from simcore.spec.errors import ConfigError

needs_tools = pytest.mark.skipif(
    shutil.which("snakemake") is None or shutil.which("ptolab") is None,
    reason="needs the installed ptolab and snakemake commands")

SCRATCH_STUDY = """\
name: ms_tiles
description: The multi-stitch add on the Ascend 950 model, with the kernel's TileShape or pinned.
kernel: multi_stitch_add
hardware: dav_3510
stages:
  - name: kernel_tiles
    description: The kernel file's default vector TileShape.
    set: {runtime_options.stitch_function_max_num: 64}
  - name: pinned_tiles
    description: The stage pins the vector TileShape, so the kernel's default does not reach it.
    set: {runtime_options.stitch_function_max_num: 64, tiles.vec: [64]}
"""
ALL_STAGES = {"multi_stitch/stitch_1", "multi_stitch/stitch_64",
              "ms_tiles/kernel_tiles", "ms_tiles/pinned_tiles"}


def snakemake(workdir: Path, *args: str, command=("snakemake",)) -> subprocess.CompletedProcess:
    return subprocess.run([*command, "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args],
                          capture_output=True, text=True, timeout=600)


def ptolab(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ptolab", *args], capture_output=True, text=True, cwd=workdir,
                          timeout=300)


def status(workdir: Path) -> dict:
    return json.loads((workdir / "results" / "nightly" / "status.json").read_text())


def flagged(workdir: Path) -> dict[str, set[str]]:
    """study/stage -> metrics beyond threshold, for the stages the nightly flagged."""
    return {f"{s['study']}/{s['stage']}": set(s["flagged"])
            for s in status(workdir)["stages"] if s["flagged"]}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A scratch project with both studies built, baselined and checked once."""
    work = tmp_path_factory.mktemp("nightly")
    shutil.copytree(REPO / "configs", work / "configs")
    (work / "configs" / "studies" / "ms_tiles.yaml").write_text(SCRATCH_STUDY)
    (work / "configs" / "nightly.yaml").write_text("studies: [multi_stitch, ms_tiles]\n")
    proc = snakemake(work, "-c4", "nightly_stages")
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = ptolab(work, "baseline", "update")
    assert proc.returncode == 0, proc.stderr
    assert "new baseline" in proc.stdout
    proc = snakemake(work, "-c4", "nightly")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return work


def perturbed(built: Path, tmp_path: Path, path: str, pattern: str, edit) -> Path:
    """A copy of the built project with one config edit, rebuilt by `snakemake nightly`."""
    work = tmp_path / "p"
    shutil.copytree(built, work, symlinks=True)
    target = work / path
    text, count = re.subn(pattern, edit, target.read_text(), count=1, flags=re.M)
    assert count == 1, f"{pattern!r} not in {path}"
    target.write_text(text)
    proc = snakemake(work, "-c4", "nightly")
    # a regression does not fail the workflow: the report is kept, the verdict is in status.json
    assert proc.returncode == 0, proc.stderr[-3000:]
    return work


@needs_tools
def test_unchanged_tree_exits_0_with_an_ok_report(built):
    assert status(built)["exit_code"] == 0 and flagged(built) == {}
    proc = ptolab(built, "nightly", "status")
    assert proc.returncode == 0 and "OK" in proc.stdout and "4 unchanged" in proc.stdout
    report = (built / "results" / "nightly" / "report.html").read_text()
    assert "No regression (exit 0)" in report and "<svg" in report
    assert "http://" not in report.replace('xmlns="http://www.w3.org/2000/svg"', "")
    proc = snakemake(built, "-n", "nightly")     # and nothing is left to do
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr


@needs_tools
def test_baseline_is_sorted_readable_and_rewritten_identically(built, tmp_path):
    path = built / "baselines" / "multi_stitch.yaml"
    text = path.read_text()
    data = yaml.safe_load(text)
    assert list(data) == sorted(data) and list(data["stages"]) == ["stitch_1", "stitch_64"]
    stage = data["stages"]["stitch_64"]
    assert stage["metrics"]["dev_tasks"] == 2 and len(stage["dev_task_spans"]) == 2
    assert "- {seq: 0, leaf_tasks: 64," in text           # one dev task per line
    proc = ptolab(built, "baseline", "update", "--study", "multi_stitch")
    assert proc.returncode == 0 and "unchanged" in proc.stdout
    assert path.read_text() == text


@needs_tools
def test_hardware_parameter_flags_exactly_the_stages_on_that_chip(built, tmp_path):
    # +1.5 us on every leaf task, on the value calibration fitted (the overlay wins)
    work = perturbed(built, tmp_path, "configs/hardware/dav_2201.fit.toml",
                     r"^head_overhead_us = ([0-9.]+)",
                     lambda m: f"head_overhead_us = {float(m.group(1)) + 1.5}")
    got = flagged(work)
    assert set(got) == {"multi_stitch/stitch_1", "multi_stitch/stitch_64"}
    for metrics in got.values():
        assert "kernel_us" in metrics                     # times beyond 2 %
        assert not metrics & {"dev_tasks", "leaf_tasks", "root_calls", "leaf_functions"}
    proc = ptolab(work, "nightly", "status")
    assert proc.returncode == 1 and "REGRESSION" in proc.stdout
    report = (work / "results" / "nightly" / "report.html").read_text()
    # the evidence points away from the program: same code, same pipe work, leaf tasks slower
    assert "pipe work unchanged" in report and "same code" in report


@needs_tools
def test_tile_shape_flags_exactly_the_stages_that_use_it(built, tmp_path):
    work = perturbed(built, tmp_path, "configs/kernels/multi_stitch_add.yaml",
                     r"^  vec: \[64\]", "  vec: [32]")
    got = flagged(work)
    assert set(got) == ALL_STAGES - {"ms_tiles/pinned_tiles"}
    for metrics in got.values():
        assert {"leaf_tasks", "aiv_tasks"} <= metrics     # counts: exact
        assert "dev_tasks" not in metrics                 # stitching is untouched
    # times: beyond 2 % where 64 root calls share a dev task and twice the tasks queue on the
    # cores; stitch_1 runs one root call at a time, whose two half tiles run side by side
    assert "kernel_us" in got["multi_stitch/stitch_64"] & got["ms_tiles/kernel_tiles"]
    report = (work / "results" / "nightly" / "report.html").read_text()
    assert "recompiled (hash differs)" in report and "128 → 256" in report


def test_missing_baseline_exits_2_and_says_what_to_run(repo_copy, monkeypatch, capsys):
    monkeypatch.chdir(repo_copy)
    assert main(["nightly", "compare"]) == 2
    err = capsys.readouterr().err
    assert "no baseline for study 'multi_stitch'" in err
    assert "ptolab baseline update --study multi_stitch" in err


def test_status_without_a_comparison_is_could_not_run(tmp_path, capsys):
    assert main(["nightly", "status", "--results", str(tmp_path)]) == 2
    assert "could not run" in capsys.readouterr().out


def test_bad_nightly_config_is_one_clear_paragraph(repo_copy):
    path = repo_copy / "configs" / "nightly.yaml"
    path.write_text("studies: [multi_stitch]\nthresholds:\n  kernal_us: 5%\n")
    with pytest.raises(ConfigError) as err:
        load_nightly(path)
    text = str(err.value)
    assert str(path) in text and "kernal_us" in text and "kernel_us" in text


def test_thresholds_default_to_the_issue_and_keep_direction():
    cfg = NightlyConfig(studies=["s"], thresholds={"kernel_us": "5%", "dev_tasks": "5%"})
    assert classify("e2e_us", 100.0, 101.9, cfg.threshold("e2e_us")).status == WITHIN
    assert classify("e2e_us", 100.0, 102.1, cfg.threshold("e2e_us")).status == REGRESSION
    assert classify("e2e_us", 100.0, 97.0, cfg.threshold("e2e_us")).status == IMPROVEMENT
    assert classify("kernel_us", 100.0, 104.0, cfg.threshold("kernel_us")).status == WITHIN
    assert classify("kernel_us", 100.0, 94.0, cfg.threshold("kernel_us")).status == IMPROVEMENT
    assert classify("leaf_tasks", 128, 129, cfg.threshold("leaf_tasks")).status == REGRESSION
    assert classify("dev_tasks", 100, 104, cfg.threshold("dev_tasks")).status == WITHIN
    assert classify("aicore_utilization", 0.5, 0.4,
                    cfg.threshold("aicore_utilization")).status == REGRESSION
    assert classify("hardware", "dav_2201", "dav_2201", cfg.threshold("hardware")) is None


def test_a_racing_stage_that_drew_another_run_of_the_same_race_is_within():
    """The single run of a racing stage jumped 20 %, but the baseline's value lies inside the
    new race range and the median barely moved: another draw, not a regression.  When the
    median moves too, or the baseline falls outside the range, it stays a regression."""
    cfg = NightlyConfig(studies=["s"])
    base = {"kernel_us": 200.0, "kernel_us_race_median": 210.0, "kernel_us_race_min": 195.0,
            "kernel_us_race_max": 260.0}

    def status_of(**new):
        changes, _ = compare_metrics(base, {**base, **new}, cfg)
        return {c.metric: c for c in changes}["kernel_us"]

    draw = status_of(kernel_us=240.0, kernel_us_race_median=211.0)
    assert draw.status == WITHIN and "race draw" in draw.threshold
    assert status_of(kernel_us=240.0, kernel_us_race_median=240.0).status == REGRESSION
    assert status_of(kernel_us=240.0, kernel_us_race_min=205.0).status == REGRESSION
    # a stage that does not race keeps the plain threshold
    changes, _ = compare_metrics({"kernel_us": 200.0}, {"kernel_us": 240.0}, cfg)
    assert changes[0].status == REGRESSION


def test_dev_task_evidence_tells_gaps_from_spans():
    rows = [{"seq": i, "leaf_tasks": 1, "start_us": 4.0 * i, "span_us": 1.0} for i in range(4)]
    later = [{**r, "start_us": 5.0 * r["seq"]} for r in rows]
    ev = dev_task_evidence(rows, later)
    assert "3 of 4 dev tasks moved" in ev.headline and "between dev tasks" in ev.headline
    assert ev.rows[0][0] == "3"                           # the one that moved most comes first


@needs_tools
def test_history_counts_runs_and_reports_are_byte_identical(built, tmp_path):
    work = tmp_path / "h"
    shutil.copytree(built, work, symlinks=True)
    first = ptolab(work, "nightly", "compare", "--run-id", "2026-11-29")
    report = (work / "results" / "nightly" / "report.html").read_bytes()
    again = ptolab(work, "nightly", "compare", "--run-id", "2026-11-29")
    assert first.returncode == again.returncode == 0 and first.stdout == again.stdout
    assert (work / "results" / "nightly" / "report.html").read_bytes() == report
    counter = ptolab(work, "nightly", "compare")
    assert "run 0002" in counter.stdout                   # after 0001 from the workflow
    runs = sorted(p.stem for p in (work / "results" / "nightly" / "history").glob("*.json"))
    assert runs == ["0001", "0002", "2026-11-29"]
    report = (work / "results" / "nightly" / "report.html").read_text()
    assert report.count("<polyline") == 2 * 4             # trend: 2 metrics x 4 stages, 3 runs


def test_advisor_findings_degrade_gracefully(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pipeline.report.advisor", None)     # not written yet
    missing = stage_findings(tmp_path)
    assert not missing.available and "not available" in missing.note
    broken = types.ModuleType("pipeline.report.advisor")
    broken.advise = lambda stage_dir: 1 / 0
    monkeypatch.setitem(sys.modules, "pipeline.report.advisor", broken)
    failed = stage_findings(tmp_path)
    assert not failed.available and "ZeroDivisionError" in failed.note
    working = types.ModuleType("pipeline.report.advisor")
    working.advise = lambda stage_dir: [{"rule": "r", "title": "t", "severity": "high"}]
    monkeypatch.setitem(sys.modules, "pipeline.report.advisor", working)
    found = stage_findings(tmp_path)
    assert found.available and found.items[0]["rule"] == "r" and found.items[0]["evidence"] == ""


@needs_tools
def test_local_cluster_profile_runs_the_nightly_through_the_executor(built, tmp_path):
    pytest.importorskip("snakemake_executor_plugin_cluster_generic",
                        reason="needs snakemake-executor-plugin-cluster-generic")
    work = tmp_path / "c"
    (work / "baselines").mkdir(parents=True)
    shutil.copytree(REPO / "configs", work / "configs")
    (work / "configs" / "nightly.yaml").write_text("studies: [multi_stitch]\n")
    shutil.copy(built / "baselines" / "multi_stitch.yaml", work / "baselines")
    # Snakemake finds executor plugins among its own interpreter's packages: run it under
    # the interpreter the plugin was found in (in a venv over system packages the
    # ``snakemake`` on PATH may be the system's, which does not see the venv's plugin)
    proc = snakemake(work, "--profile", str(REPO / "workflow" / "profiles" / "local-cluster"),
                     "nightly", command=(sys.executable, "-m", "snakemake"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "external jobid" in proc.stdout + proc.stderr   # jobs went through the executor
    assert status(work)["exit_code"] == 0


@needs_tools
def test_nightly_run_gives_automation_its_exit_codes(built, tmp_path):
    work = tmp_path / "r"
    shutil.copytree(built, work, symlinks=True)
    proc = ptolab(work, "nightly", "run", "-c4", "--keep-results", "--run-id", "ci-7")
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.startswith("ptolab nightly run ci-7: OK.")
    (work / "baselines" / "ms_tiles.yaml").unlink()
    proc = ptolab(work, "nightly", "run", "-c4", "--keep-results")
    assert proc.returncode == 2
    assert "could not run" in proc.stdout
    assert "ptolab baseline update --study ms_tiles" in proc.stdout
    assert not (work / "results" / "nightly" / "status.json").exists()   # no stale verdict
