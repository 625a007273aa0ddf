"""End to end: the real `snakemake` and the real `ptolab` on a copy of the shipped configs."""
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, one_study_copy

pytestmark = pytest.mark.skipif(shutil.which("snakemake") is None or shutil.which("ptolab") is None,
                                reason="needs the installed ptolab and snakemake commands")


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args],
                          capture_output=True, text=True, timeout=600)


def planned_jobs(dry_run_output: str) -> list[tuple[str, str]]:
    """(rule, stage) for every job a dry run lists."""
    jobs, rule = [], None
    for line in dry_run_output.splitlines():
        if line.startswith("rule "):
            rule = line.split()[1].rstrip(":")
            jobs.append((rule, ""))
        elif line.strip().startswith("wildcards:") and "stage=" in line and jobs:
            jobs[-1] = (rule, line.split("stage=")[1].split(",")[0].strip())
    return jobs


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """multi_stitch alone: these tests edit the copy, so it is not the shared default build."""
    work = one_study_copy(tmp_path_factory.mktemp("wf"), "multi_stitch")
    proc = snakemake(work, "-c2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return work


def stage_metrics(work: Path, stage: str, kind: str = "parsed") -> dict:
    sub = "parsed" if kind == "parsed" else "run"
    return json.loads((work / "results" / "multi_stitch" / stage / sub / "metrics.json").read_text())


def test_workflow_builds_reports_and_stages_follow_the_knob(built):
    stitch1, stitch64 = stage_metrics(built, "stitch_1"), stage_metrics(built, "stitch_64")
    assert stitch64["dev_tasks"] == 2 and stitch64["root_calls"] == 128
    assert stitch1["dev_tasks"] == 128 and stitch1["root_calls"] == 128
    assert stitch64["e2e_us"] < stitch1["e2e_us"]
    for m in (stitch1, stitch64):          # parse computed these from the profiling files
        assert m["sources"]["kernel_us"] == "merged_swimlane.json"
        assert m["sources"]["dev_tasks"] == "dyn_topo.txt"
        assert m["sources"]["e2e_us"] == "machine_trace_perf_data_0.json"
    report = (built / "results" / "multi_stitch" / "report.html").read_text()
    assert "stitch_1" in report and "stitch_64" in report and "<svg" in report
    assert "http://" not in report.replace('xmlns="http://www.w3.org/2000/svg"', "")
    index = (built / "results" / "index.html").read_text()
    assert 'href="multi_stitch/report.html"' in index


def test_dry_run_is_clean_then_one_knob_reruns_one_stage(built):
    proc = snakemake(built, "-n")
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr
    study = built / "configs" / "studies" / "multi_stitch.yaml"
    study.write_text(study.read_text().replace("stitch_function_max_num: 64}",
                                               "stitch_function_max_num: 32}"))
    proc = snakemake(built, "-n")
    jobs = planned_jobs(proc.stdout)
    stage_jobs = {stage for rule, stage in jobs if stage}
    assert stage_jobs == {"stitch_64"}
    assert {rule for rule, _ in jobs} >= {"stage", "report"}
    proc = snakemake(built, "-c2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert stage_metrics(built, "stitch_64")["dev_tasks"] == 4


def test_bad_study_stops_the_workflow_with_a_clear_error(tmp_path):
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    study = tmp_path / "configs" / "studies" / "multi_stitch.yaml"
    study.write_text(study.read_text().replace("stitch_function_max_num: 1}",
                                               "stitch_function_max_num: 0}"))
    proc = snakemake(tmp_path, "-c1")
    assert proc.returncode != 0
    assert "stitch_1" in proc.stderr and "stitch_function_max_num" in proc.stderr
    assert not (tmp_path / "results").exists()


def test_a_broken_workflow_file_names_its_line(tmp_path):
    work = one_study_copy(tmp_path, "multi_stitch")
    (work / "configs" / "workflow.yaml").write_text("studies: [multi_stitch]\n results: results\n")
    proc = snakemake(work, "-n")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "configs/workflow.yaml" in proc.stderr and "line 2" in proc.stderr


def test_a_study_the_workflow_does_not_list_stops_with_what_to_do(tmp_path):
    """Asking snakemake for the report of a study file that configs/workflow.yaml does not
    list: one ptolab paragraph naming the file to edit, no input-function traceback."""
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    (tmp_path / "configs" / "studies" / "extra.yaml").write_text(
        "name: extra\nkernel: softmax\nstages:\n  - {name: only, description: as shipped}\n")
    proc = snakemake(tmp_path, "-c1", "results/extra/report.html")
    assert proc.returncode != 0
    assert "study 'extra' is not in this workflow" in proc.stderr
    assert "configs/workflow.yaml" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "results" / "extra" / "report.html").exists()
    # an option's value under results/ is not taken for a study (snakemake --report PATH)
    dry = snakemake(tmp_path, "-n", "-c1", "--report", "results/snk/report.html")
    assert "not in this workflow" not in dry.stderr


def test_ptolab_simulate_command(tmp_path):
    out = tmp_path / "dir"
    proc = subprocess.run(["ptolab", "simulate", str(REPO / "configs/kernels/multi_stitch_add.yaml"),
                           "--set", "runtime_options.stitch_function_max_num=64",
                           "--set", "debug_options.runtime_debug_mode=1", "--out", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "-------- AICORE Prof Summary --------" in proc.stdout
    m = json.loads((out / "metrics.json").read_text())
    assert m["dev_tasks"] == 2 and m["root_calls"] == 128
    assert (out / "merged_swimlane.json").exists() and (out / "tilefwk_L1_prof_data.json").exists()
    # the summary is computed from the files' 50 MHz stamps, the last line from the model:
    # where whole ticks round the span differently, the line gives both, labelled
    summary = float(re.search(r"AICore End-to-End Time: ([\d.]+)", proc.stdout).group(1))
    line = re.search(r"kernel_us: ([\d.]+)( \(the summary's ([\d.]+))?", proc.stdout)
    assert float(line.group(1)) == pytest.approx(m["kernel_us"], abs=0.005)
    if f"{summary:.2f}" != line.group(1):
        assert float(line.group(3)) == summary
    else:
        assert line.group(2) is None


def test_ptolab_simulate_without_out_writes_a_pypto_style_folder(tmp_path):
    proc = subprocess.run(["ptolab", "simulate", str(REPO / "configs/kernels/multi_stitch_add.yaml")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (folder,) = (tmp_path / "output").iterdir()
    assert folder.name.startswith("output_") and (folder / "metrics.json").exists()


def test_ptolab_compile_prints_counts(tmp_path):
    proc = subprocess.run(["ptolab", "compile", str(REPO / "configs/kernels/multi_stitch_add.yaml"),
                           "--out", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    counts = json.loads((tmp_path / "compile.json").read_text())
    assert f"dev_tasks: {counts['dev_tasks']}" in proc.stdout
    assert counts["root_calls"] == 128 and counts["loop_bodies"] == 128
    # a second compile replaces its own files; a program.json it did not write stays
    again = subprocess.run(["ptolab", "compile", str(REPO / "configs/kernels/multi_stitch_add.yaml"),
                            "--out", str(tmp_path)], capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "program.json").write_text("{}")
    refused = subprocess.run(["ptolab", "compile", str(REPO / "configs/kernels/multi_stitch_add.yaml"),
                              "--out", str(theirs)], capture_output=True, text=True)
    assert refused.returncode == 2 and "program.json" in refused.stderr
    assert (theirs / "program.json").read_text() == "{}"


def test_a_failed_job_prints_its_own_error(tmp_path):
    work = one_study_copy(tmp_path, "multi_stitch")
    study = work / "configs" / "studies" / "multi_stitch.yaml"
    study.write_text(study.read_text().replace(
        "{runtime_options.stitch_function_max_num: 64}",
        "{runtime_options.stitch_function_max_num: 64, params.W: 1048576, "
        "tiles.vec: [1048576]}"))
    assert "tiles.vec" in study.read_text()
    proc = snakemake(work, "-c1")
    assert proc.returncode != 0
    assert "ptolab stage multi_stitch/stitch_64 failed" in proc.stderr
    assert "OoO" in proc.stderr and "UB" in proc.stderr      # the compiler's own message
    stage = work / "results" / "multi_stitch" / "stitch_64"
    assert not (stage / "parsed" / "metrics.json").exists()


def test_a_failed_rerun_leaves_no_stage_folder_that_looks_complete(tmp_path):
    """Snakemake deletes a failed job's declared outputs; the rest of the stage folder (the
    earlier run's record, perf files, analysis) must not outlive them and pass for a run."""
    work = one_study_copy(tmp_path, "multi_stitch")
    assert snakemake(work, "-c1").returncode == 0
    stage = work / "results" / "multi_stitch" / "stitch_64"
    assert (stage / "run" / "metrics.json").exists()
    study = work / "configs" / "studies" / "multi_stitch.yaml"
    study.write_text(study.read_text().replace(
        "{runtime_options.stitch_function_max_num: 64}",
        "{runtime_options.stitch_function_max_num: 64, params.W: 1048576, "
        "tiles.vec: [1048576]}"))
    report = work / "results" / "multi_stitch" / "report.html"
    assert report.exists() and "multi_stitch/report.html" in (work / "results" / "index.html") \
        .read_text()
    proc = snakemake(work, "-c1")
    assert proc.returncode != 0 and "OoO" in proc.stderr
    assert not stage.exists()
    # the report showed the stage's earlier build and linked its files: it goes, and the
    # index no longer links it
    assert not report.exists()
    assert "multi_stitch/report.html" not in (work / "results" / "index.html").read_text()
    assert (work / "results" / "multi_stitch" / "logs" / "stitch_64.log").exists()
    other = work / "results" / "multi_stitch" / "stitch_1"
    assert (other / "parsed" / "metrics.json").exists()     # the stage that did not rerun


def test_stage_folder_holds_only_this_build(built):
    """Every file a stage's report reads was written by the same job: nothing else is there."""
    stage = built / "results" / "multi_stitch" / "stitch_1"
    assert sorted(p.name for p in stage.iterdir()) == [".ptolab_run.json", "compile", "parsed",
                                                       "run"]
    record = json.loads((stage / "run" / "metrics.json").read_text())
    parsed = stage_metrics(built, "stitch_1")
    assert all(parsed[k] == record[k] for k in ("dev_tasks", "leaf_tasks", "flops"))
    assert (stage / "run" / "dyn_topo.txt").read_bytes() == \
        (stage / "compile" / "dyn_topo.txt").read_bytes()          # compiled once
