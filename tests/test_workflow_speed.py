"""What keeps the knob-edit loop short: commands import only what they use, configs parse with
libyaml, the workflow does not validate an unchanged study twice (in one start or across
runs), the report job refreshes the index (no index job), and snakemake exits with its last
job."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.workflow import load_plan
from simcore.spec import loader
from simcore.spec.errors import ConfigError

from conftest import REPO


def test_every_shipped_yaml_config_reads_the_same_with_the_fast_parser():
    files = sorted((REPO / "configs").rglob("*.yaml"))
    assert files
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert loader._yaml(text) == yaml.safe_load(text), path


def test_a_broken_yaml_file_is_reported_by_the_plain_parser(tmp_path):
    bad = tmp_path / "k.yaml"
    bad.write_text("a: b: c\n")
    with pytest.raises(ConfigError, match="line 1, column 5: mapping values are not allowed "
                                          "here"):
        loader.read_mapping(bad)


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\n"
                          "print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, cwd=REPO, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_the_index_and_the_command_line_import_no_table_or_array_library(tmp_path):
    study = REPO / "configs" / "studies" / "multi_stitch.yaml"
    mods = _modules_after(f"from pipeline.report.render import render_index\n"
                          f"from pipeline.cli import build_parser\nbuild_parser()\n"
                          f"render_index({str(tmp_path)!r}, [{str(study)!r}], "
                          f"{str(tmp_path / 'index.html')!r})")
    assert (tmp_path / "index.html").exists()
    assert "polars" not in mods and "numpy" not in mods
    assert "pipeline.report.knobs" not in mods      # its kernel models are not built


def test_a_study_planned_twice_is_validated_again_only_after_an_edit(repo_copy, monkeypatch):
    from pipeline import workflow
    checks = []
    check = workflow._check_stages
    monkeypatch.setattr(workflow, "_check_stages", lambda *a: checks.append(a[0].name)
                        or check(*a))
    config = {"studies": ["multi_stitch"], "results": "results"}
    configs = repo_copy / "configs"
    first = load_plan(configs, config)
    again = load_plan(configs, config)
    assert checks == ["multi_stitch"]
    assert again.studies == first.studies
    # a kernel edit that breaks a stage is found by the next plan
    kernel = configs / "kernels" / "multi_stitch_add.yaml"
    kernel.write_text(kernel.read_text() + "\nbogus: 1\n")
    with pytest.raises(ConfigError):
        load_plan(configs, config)
    assert checks == ["multi_stitch", "multi_stitch"]


def test_a_memo_file_keeps_validated_studies_for_the_next_run(repo_copy, monkeypatch):
    from pipeline import workflow
    checks = []
    check = workflow._check_stages
    monkeypatch.setattr(workflow, "_check_stages", lambda *a: checks.append(a[0].name)
                        or check(*a))
    monkeypatch.setattr(workflow, "_STUDY_MEMO", {})
    config = {"studies": ["multi_stitch", "rmsnorm_tile"], "results": "results"}
    configs = repo_copy / "configs"
    memo = repo_copy / ".snakemake" / "ptolab" / "plan.pickle"
    first = load_plan(configs, config, memo=memo)
    assert checks == ["multi_stitch", "rmsnorm_tile"] and memo.exists()

    def next_run():
        workflow._STUDY_MEMO.clear()        # a new snakemake process knows only the file
        return load_plan(configs, config, memo=memo)

    assert next_run().studies == first.studies
    assert checks == ["multi_stitch", "rmsnorm_tile"]          # nothing validated again
    study = configs / "studies" / "rmsnorm_tile.yaml"
    study.write_text(study.read_text() + "\n# a knob edit\n")
    next_run()
    assert checks == ["multi_stitch", "rmsnorm_tile", "rmsnorm_tile"]   # the edited one only
    # a memo from other model code is not trusted
    monkeypatch.setattr(workflow, "_memo_version", lambda: "other code")
    next_run()
    assert checks[3:] == ["multi_stitch", "rmsnorm_tile"]
    # nor is a damaged one
    memo.write_bytes(b"not a pickle")
    monkeypatch.undo()
    monkeypatch.setattr(workflow, "_check_stages", lambda *a: checks.append(a[0].name)
                        or check(*a))
    next_run()
    assert checks[5:] == ["multi_stitch", "rmsnorm_tile"]


def test_a_memo_notices_a_fit_overlay_that_appears(repo_copy, monkeypatch):
    from pipeline import workflow
    from simcore.spec.hardware import fit_overlay
    monkeypatch.setattr(workflow, "_STUDY_MEMO", {})
    config = {"studies": ["multi_stitch"], "results": "results"}
    configs = repo_copy / "configs"
    memo = repo_copy / "plan.pickle"
    sp = load_plan(configs, config, memo=memo).study("multi_stitch")
    overlay = fit_overlay(sp.hardware_path)
    assert sp.fit_path == (overlay if overlay.exists() else None)
    if overlay.exists():
        overlay.unlink()
    else:
        overlay.write_text("")
    workflow._STUDY_MEMO.clear()
    again = load_plan(configs, config, memo=memo).study("multi_stitch")
    assert again.fit_path == (overlay if overlay.exists() else None) != sp.fit_path


def test_snakemakes_pending_rescheduling_timer_is_dropped_when_the_workflow_ends():
    import threading
    import time

    from snakemake.scheduling.job_scheduler import JobScheduler

    from pipeline.workflow import drop_rescheduling_timers

    class Scheduler:
        _open_jobs = threading.Semaphore(0)

    other = threading.Timer(60, lambda: None)
    other.start()
    try:
        before = set(threading.enumerate())
        # Snakemake's own method, so a rename there fails here rather than slowing every run
        JobScheduler._schedule_reevalutation(Scheduler(), 60)
        (timer,) = set(threading.enumerate()) - before
        assert drop_rescheduling_timers() == 1
        timer.join(5)
        assert not timer.is_alive() and other.is_alive()     # only the scheduler's timer
        assert not Scheduler._open_jobs.acquire(timeout=0.1)
    finally:
        other.cancel()


def _snakemake(work, *args):
    return subprocess.run(["snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work), *args],
                          capture_output=True, text=True, timeout=600)


def _planned(dry_run: str) -> list[tuple[str, str]]:
    jobs = []
    for line in dry_run.splitlines():
        if line.startswith(("rule ", "localrule ")):
            jobs.append((line.split()[1].rstrip(":"), ""))
        elif line.strip().startswith("wildcards:") and "stage=" in line:
            jobs[-1] = (jobs[-1][0], line.split("stage=")[1].split(",")[0].strip())
    return sorted(jobs)


@pytest.mark.skipif(shutil.which("snakemake") is None or shutil.which("ptolab") is None,
                    reason="needs the installed ptolab and snakemake commands")
def test_a_knob_edit_refreshes_the_index_in_the_report_job(tmp_path):
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    (tmp_path / "configs" / "workflow.yaml").write_text(
        "studies: [multi_stitch, loop_merge]\nresults: results\n")
    (tmp_path / "configs" / "nightly.yaml").write_text("studies: [multi_stitch]\n")
    proc = _snakemake(tmp_path, "-c2")            # two reports may refresh it side by side
    assert "were not present when the DAG was created" not in proc.stderr
    assert proc.returncode == 0, proc.stderr[-3000:]
    index = tmp_path / "results" / "index.html"
    studies = [str(tmp_path / "configs" / "studies" / f"{s}.yaml")
               for s in ("multi_stitch", "loop_merge")]

    def fresh() -> bytes:
        out = tmp_path / "fresh.html"
        subprocess.run(["ptolab", "index", str(tmp_path / "results"), *studies, "--out",
                        str(out)], check=True, capture_output=True)
        return out.read_bytes()

    before = index.read_bytes()
    assert before == fresh()
    assert b'href="multi_stitch/report.html"' in before
    assert b'href="loop_merge/report.html"' in before
    study = tmp_path / "configs" / "studies" / "multi_stitch.yaml"
    study.write_text(study.read_text().replace("stitch_function_max_num: 64}",
                                               "stitch_function_max_num: 32}"))
    proc = _snakemake(tmp_path, "-n")
    assert _planned(proc.stdout) == [("all", ""), ("report", ""), ("stage", "stitch_64")]
    proc = _snakemake(tmp_path, "-c2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = index.read_bytes()
    assert after != before and after == fresh()     # the new stitch_64 figures are listed
    # a study added to the workflow file reruns the index job (and builds that study)
    (tmp_path / "configs" / "workflow.yaml").write_text(
        "studies: [loop_merge, multi_stitch]\nresults: results\n")
    proc = _snakemake(tmp_path, "-n")
    assert _planned(proc.stdout) == [("all", ""), ("index", "")]


def test_index_renders_wait_their_turn(tmp_path):
    import fcntl
    import threading

    from pipeline.commands.index import refresh
    study = REPO / "configs" / "studies" / "multi_stitch.yaml"
    out = tmp_path / "results" / "index.html"
    out.parent.mkdir()
    fd = os.open(out.parent, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)                  # another job is rendering
    done = threading.Event()
    worker = threading.Thread(target=lambda: (refresh(out.parent, [study], out), done.set()))
    worker.start()
    try:
        assert not done.wait(0.5) and not out.exists()
    finally:
        os.close(fd)
    worker.join(30)
    assert done.is_set() and out.exists()
    out.unlink()                                    # a report job leaves a missing index be
    assert not refresh(out.parent, [study], out, if_present=True) and not out.exists()


def test_where_a_folder_cannot_be_locked_a_hidden_lock_file_is(tmp_path, monkeypatch):
    import fcntl

    from pipeline.commands.index import refresh
    real, locked = fcntl.flock, []

    def flock(fd, op):
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            raise OSError(9, "Bad file descriptor")          # as NFS answers for a folder
        locked.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    out = tmp_path / "results" / "index.html"
    assert refresh(out.parent, [REPO / "configs" / "studies" / "multi_stitch.yaml"], out)
    assert out.exists() and locked == [str(out.parent / ".index.lock")]
