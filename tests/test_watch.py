"""The fast knob-edit loop (``ptolab watch``, pipeline/watch.py).

The watch must build exactly what ``snakemake`` would build after the same edit, and only
that: the jobs it runs are the rules' commands, a job reruns when what Snakemake compares
for it changed, and after a round Snakemake finds the results up to date.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from pipeline.watch import build_plan, jobs
from tests.conftest import REPO, one_study_copy


def _signatures(work: Path, studies: list[str]) -> dict:
    plan = build_plan(work / "configs")[0]
    return {job.key: job.signature for job in jobs(plan, studies)}


def _set_stage_knob(study_file: Path, stage: int, key: str, value) -> None:
    data = yaml.safe_load(study_file.read_text(encoding="utf-8"))
    data["stages"][stage].setdefault("set", {})[key] = value
    study_file.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def test_a_knob_edit_changes_that_stage_and_its_report_only(repo_copy):
    before = _signatures(repo_copy, ["multi_stitch", "softmax_tile"])
    _set_stage_knob(repo_copy / "configs" / "studies" / "multi_stitch.yaml", 1,
                    "runtime_options.stitch_function_max_num", 32)
    after = _signatures(repo_copy, ["multi_stitch", "softmax_tile"])
    changed = {key for key in before if before[key] != after[key]}
    assert changed == {("multi_stitch", "stitch_64"), ("multi_stitch", "report")}


def test_editing_a_kernel_or_the_chip_reruns_every_stage_that_reads_it(repo_copy):
    studies = ["multi_stitch", "softmax_tile"]
    before = _signatures(repo_copy, studies)
    kernel = repo_copy / "configs" / "kernels" / "multi_stitch_add.yaml"
    kernel.write_text(kernel.read_text(encoding="utf-8") + "\n# a comment is an edit too\n",
                      encoding="utf-8")
    after = _signatures(repo_copy, studies)
    changed = {key for key in before if before[key] != after[key]}
    assert changed == {("multi_stitch", "stitch_1"), ("multi_stitch", "stitch_64"),
                       ("multi_stitch", "report")}
    chip = repo_copy / "configs" / "hardware" / "dav_2201.toml"
    chip.write_text(chip.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    again = _signatures(repo_copy, studies)
    rerun = {key for key in after if after[key] != again[key]}
    assert {key for key in rerun if key[1] != "report"} == \
        {key for key in after if key[1] not in ("report", "index")}


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="needs snakemake")
def test_the_watch_runs_the_commands_the_rules_run(tmp_path, monkeypatch):
    """Every stage and report job's arguments are the ones the Snakefile's shell line
    gives ``ptolab`` (read from ``snakemake --dry-run --printshellcmds``)."""
    work = one_study_copy(tmp_path, "multi_stitch")
    proc = subprocess.run(["snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work),
                           "-n", "-p", "-c1", "results/multi_stitch/report.html"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    shell = [shlex.split(line.split("Shell command: ptolab ", 1)[1].split(" > ")[0])
             for line in proc.stdout.splitlines() if "Shell command: ptolab " in line]
    monkeypatch.chdir(work)                      # the watch runs in the workflow's folder
    plan, _ = build_plan(Path("configs"))
    planned = {tuple(job.argv) for job in jobs(plan, ["multi_stitch"]) if job.name != "index"}
    assert len(shell) == 3                       # two stages and the report
    assert {tuple(words) for words in shell} <= planned


def _wait_for(predicate, timeout: float, what: str, proc=None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.05)
    out = proc.stdout.read() if proc is not None and proc.poll() is not None else ""
    raise AssertionError(f"timed out waiting for {what}\n{out}")


def _start_watch(tmp_path: Path, edits: int):
    work = one_study_copy(tmp_path / "watched", "multi_stitch")
    out_file = (tmp_path / "watch.out").open("w+")
    proc = subprocess.Popen([shutil.which("ptolab"), "watch", "multi_stitch",
                             "--dir", str(work), "--edits", str(edits), "--interval", "0.1"],
                            stdout=out_file, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    log = lambda: (tmp_path / "watch.out").read_text()   # noqa: E731
    return work, proc, out_file, log


def _same_as_snakemake_builds(tmp_path: Path, work: Path) -> None:
    """The watched results are byte for byte what snakemake builds from the same configs
    in a fresh folder, and snakemake, asked in the watched folder, has nothing to do."""
    fresh = tmp_path / "fresh"
    shutil.copytree(work / "configs", fresh / "configs")
    snake = ["snakemake", "-s", str(REPO / "Snakefile"), "-c2",
             "results/multi_stitch/report.html", "results/index.html"]
    done = subprocess.run(snake + ["-d", str(fresh)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    files = [p for p in sorted((fresh / "results" / "multi_stitch").rglob("*")) if p.is_file()]
    assert len(files) > 20
    for path in files:
        twin = work / "results" / "multi_stitch" / path.relative_to(
            fresh / "results" / "multi_stitch")
        assert twin.read_bytes() == path.read_bytes(), path
    dry = subprocess.run(snake + ["-d", str(work), "-n"], capture_output=True, text=True,
                         timeout=120)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-3000:]


needs_commands = pytest.mark.skipif(
    shutil.which("snakemake") is None or shutil.which("ptolab") is None,
    reason="needs the installed ptolab and snakemake commands")


@needs_commands
def test_an_edit_under_watch_builds_what_snakemake_builds(tmp_path):
    """Start a watch, edit a knob, then save a bad value: the edited stage alone is
    rebuilt, byte for byte as snakemake builds it, Snakemake then has nothing to do, and
    the bad edit rebuilt nothing and lost nothing."""
    work, proc, out_file, log = _start_watch(tmp_path, edits=2)
    study = work / "configs" / "studies" / "multi_stitch.yaml"
    report = work / "results" / "multi_stitch" / "report.html"
    try:
        _wait_for(lambda: "watching" in log(), 300, "the first build", proc)
        first = report.stat().st_mtime_ns
        untouched = (work / "results" / "multi_stitch" / "stitch_1" / "run" /
                     "merged_swimlane.json").stat().st_mtime_ns

        # edit 1: stage stitch_64 now stitches 32 root calls
        _set_stage_knob(study, 1, "runtime_options.stitch_function_max_num", 32)
        _wait_for(lambda: "recorded for snakemake" in log(), 120, "the rebuild", proc)
        assert report.stat().st_mtime_ns > first
        # the line shows what the edit moved: 2 dev tasks of 64 calls became 4 of 32
        assert re.search(r"multi_stitch/stitch_64: [\d.]+ s, kernel_us [\d.]+ -> [\d.]+, "
                         r"e2e_us [\d.]+ -> [\d.]+, dev_tasks 2 -> 4, leaf_tasks 128", log())
        assert "multi_stitch/stitch_1:" not in log()      # its knobs did not change
        assert (work / "results" / "multi_stitch" / "stitch_1" / "run" /
                "merged_swimlane.json").stat().st_mtime_ns == untouched

        # edit 2: a value the config model refuses: an error naming the field, no rebuild
        rebuilt = report.stat().st_mtime_ns
        good, good_stat = study.read_bytes(), study.stat()
        _set_stage_knob(study, 0, "runtime_options.stitch_function_max_num", "many")
        proc.wait(timeout=120)
        assert proc.returncode == 0
        assert "error" in log() and "stitch_function_max_num" in log()
        assert report.stat().st_mtime_ns == rebuilt
    finally:
        if proc.poll() is None:
            proc.kill()
        out_file.close()
    # the good edit back as it was (content and time: Snakemake dates the report's inputs)
    study.write_bytes(good)
    os.utime(study, ns=(good_stat.st_atime_ns, good_stat.st_mtime_ns))
    _same_as_snakemake_builds(tmp_path, work)


@needs_commands
def test_an_edit_saved_while_snakemake_records_the_last_one_is_not_lost(tmp_path):
    """The recording snakemake plans from the configs as it finds them; a second edit saved
    right after the first rebuild (here the kernel, so both stages rebuild) may reach it.  Whatever the timing, once the watch has
    stopped its results are what snakemake builds from the final configs and snakemake
    agrees that nothing is left to do."""
    work, proc, out_file, log = _start_watch(tmp_path, edits=2)
    study = work / "configs" / "studies" / "multi_stitch.yaml"
    try:
        _wait_for(lambda: "watching" in log(), 300, "the first build", proc)
        _set_stage_knob(study, 1, "runtime_options.stitch_function_max_num", 32)
        _wait_for(lambda: "rebuilt" in log(), 120, "the rebuild", proc)
        # the kernel: both stages rebuild, side by side in forked copies of the watch
        kernel = work / "configs" / "kernels" / "multi_stitch_add.yaml"
        kernel.write_text(kernel.read_text(encoding="utf-8") + "\n# edited\n")
        proc.wait(timeout=120)
        assert proc.returncode == 0, log()
        assert re.search(r"multi_stitch/stitch_1: [\d.]+ s", log())
    finally:
        if proc.poll() is None:
            proc.kill()
        out_file.close()
    _same_as_snakemake_builds(tmp_path, work)


class _Done:
    """Stands for a finished snakemake process."""
    returncode = 0

    def communicate(self):
        return "", None

    def poll(self):
        return 0


def _synced_watch(work: Path, monkeypatch, studies: list[str]):
    import pipeline.watch as watch
    monkeypatch.chdir(work)
    ran: list[str] = []
    monkeypatch.setattr(watch, "run_job", lambda job: (ran.append(job.label), (0, ""))[1])
    monkeypatch.setattr(watch.Watch, "snakemake",
                        lambda self, plan, names, touch=False: (ran.append(
                            "touch" if touch else "snakemake"), _Done())[1])
    w = watch.Watch(Path("."), studies, cores=1, say=lambda text: None)
    w.start()
    ran.clear()
    return w, ran


def test_a_round_runs_the_changed_stage_before_its_report_then_records(repo_copy,
                                                                       monkeypatch):
    w, ran = _synced_watch(repo_copy, monkeypatch, ["multi_stitch", "softmax_tile"])
    assert w.rebuild() == []                      # nothing changed: nothing runs
    _set_stage_knob(Path("configs/studies/multi_stitch.yaml"), 0,
                    "runtime_options.stitch_function_max_num", 2)
    w.rebuild()
    assert ran == ["multi_stitch/stitch_1", "multi_stitch/report", "touch"]


def test_an_edit_undone_is_recorded_for_snakemake(repo_copy, monkeypatch):
    """A study file saved broken, then restored: nothing needs building, but the file is
    newer than the outputs, so the round still records them (else snakemake redoes them)."""
    w, ran = _synced_watch(repo_copy, monkeypatch, ["multi_stitch"])
    study = Path("configs/studies/multi_stitch.yaml")
    good = study.read_text(encoding="utf-8")
    study.write_text(good.replace("stages:", "stages: [oops"), encoding="utf-8")
    assert w.changed() and w.rebuild() == [] and ran == []
    study.write_text(good, encoding="utf-8")
    assert w.changed() and w.rebuild() == []
    assert ran == ["touch"]
    assert w.rebuild() == [] and ran == ["touch"]     # nothing saved since: no second one


def test_a_failed_stage_takes_its_report_along_and_is_retried(repo_copy, monkeypatch):
    """As under snakemake: the failed stage drops its folder, so its study's report goes
    and the index is rewritten; the next round rebuilds both, even when the edit was
    simply undone (the files then match what was built before the failure)."""
    import pipeline.watch as watch
    w, ran = _synced_watch(repo_copy, monkeypatch, ["multi_stitch"])
    report = Path("results/multi_stitch/report.html")
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("the report of the build before", encoding="utf-8")
    monkeypatch.setattr(watch, "run_job", lambda job: (ran.append(job.label),
                                                       (3 if job.name != "index" else 0,
                                                        "boom"))[1])
    study = Path("configs/studies/multi_stitch.yaml")
    before = study.read_text(encoding="utf-8")
    _set_stage_knob(study, 1, "runtime_options.stitch_function_max_num", 8)
    w.rebuild()
    assert ran == ["multi_stitch/stitch_64", "index"]     # no report, no record
    assert not report.exists()
    ran.clear()
    monkeypatch.setattr(watch, "run_job", lambda job: (ran.append(job.label), (0, ""))[1])
    study.write_text(before, encoding="utf-8")            # the edit undone
    w.rebuild()
    assert ran == ["multi_stitch/stitch_64", "multi_stitch/report", "touch"]


def test_a_change_to_ptolabs_code_is_handed_to_snakemake(repo_copy, monkeypatch):
    import pipeline.watch as watch
    w, ran = _synced_watch(repo_copy, monkeypatch, ["multi_stitch"])
    monkeypatch.setattr(watch, "code_digest", lambda: "edited since the watch started")
    _set_stage_knob(Path("configs/studies/multi_stitch.yaml"), 1,
                    "runtime_options.stitch_function_max_num", 8)
    w.rebuild()
    assert ran == ["snakemake"]
    # and so is every later round: this process still runs the code it loaded
    _set_stage_knob(Path("configs/studies/multi_stitch.yaml"), 1,
                    "runtime_options.stitch_function_max_num", 4)
    w.rebuild()
    assert ran == ["snakemake", "snakemake"]


def test_a_study_kernel_imported_from_python_reimports_when_its_source_changes(
        tmp_path, monkeypatch):
    """A study naming a .py kernel: its import job runs first, and an edit to the source
    reruns the import and every stage (their kernel is the imported config)."""
    work = one_study_copy(tmp_path, "multi_stitch")
    (work / "configs" / "kernels" / "softmax.py").write_text(
        (REPO / "tests" / "kernels_py" / "softmax.py").read_text(encoding="utf-8"))
    (work / "configs" / "studies" / "py_softmax.yaml").write_text(
        "name: py_softmax\nkernel: kernels/softmax.py:softmax\nstages:\n"
        "  - {name: own_tiles, description: the kernel's own tiles}\n"
        "  - {name: whole_rows, description: whole rows,"
        " set: {tiles.vec: [1, 32, 1, 256]}}\n")
    (work / "configs" / "workflow.yaml").write_text("studies: [py_softmax]\nresults: results\n")
    w, ran = _synced_watch(work, monkeypatch, ["py_softmax"])
    source = Path("configs/kernels/softmax.py")
    source.write_text(source.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    w.rebuild()
    assert ran == ["py_softmax/import", "py_softmax/own_tiles", "py_softmax/whole_rows",
                   "py_softmax/report", "touch"]


def test_without_study_names_the_watch_builds_what_a_bare_snakemake_builds(repo_copy,
                                                                          monkeypatch):
    import yaml as _yaml
    w, _ = _synced_watch(repo_copy, monkeypatch, [])
    plan, default = build_plan(Path("configs"))
    listed = _yaml.safe_load(Path("configs/workflow.yaml").read_text())["studies"]
    assert w.studies(plan) == default == listed


def test_a_file_caught_half_written_is_read_again_not_reported(repo_copy, monkeypatch):
    """An editor that truncates the file and then writes it can be caught in between: the
    empty file must not end the round as a config error while the write is coming."""
    import threading
    w, ran = _synced_watch(repo_copy, monkeypatch, ["multi_stitch"])
    said: list[str] = []
    w.say = said.append
    study = Path("configs/studies/multi_stitch.yaml")
    data = yaml.safe_load(study.read_text(encoding="utf-8"))
    data["stages"][1]["set"]["runtime_options.stitch_function_max_num"] = 16
    study.write_text("", encoding="utf-8")
    w.changed()
    threading.Timer(0.1, lambda: study.write_text(yaml.safe_dump(data, sort_keys=False),
                                                  encoding="utf-8")).start()
    w.rebuild()
    assert not [text for text in said if "error" in text]
    assert ran == ["multi_stitch/stitch_64", "multi_stitch/report", "touch"]


def test_an_edit_saved_during_a_round_starts_the_next_one(repo_copy, monkeypatch):
    import pipeline.watch as watch
    w, ran = _synced_watch(repo_copy, monkeypatch, ["multi_stitch"])
    study = Path("configs/studies/multi_stitch.yaml")

    def slow_job(job):
        ran.append(job.label)
        if job.name == "stitch_64":       # the user saves again while this stage builds
            _set_stage_knob(study, 0, "runtime_options.stitch_function_max_num", 2)
        return 0, ""
    monkeypatch.setattr(watch, "run_job", slow_job)
    _set_stage_knob(study, 1, "runtime_options.stitch_function_max_num", 8)
    assert w.changed()
    w.rebuild()
    w.watch_new_files()
    assert w.changed()                   # the second save is seen ...
    ran.clear()
    w.rebuild()
    assert ran[0] == "multi_stitch/stitch_1"     # ... and built


def test_a_racing_stage_line_shows_its_race_median_too(tmp_path):
    """A racing stage's single run is one draw: the watch line gives the median beside it,
    and a stage that does not race shows no median."""
    import json
    from pipeline.watch import Job, _moved
    out = tmp_path / "stage"
    (out / "parsed").mkdir(parents=True)
    job = Job("glm", "stitch_512", ("stage", "k.yaml", "--out", str(out)), "sig", tmp_path / "l")
    (out / "parsed" / "metrics.json").write_text(json.dumps(
        {"kernel_us": 213.0, "kernel_us_race_median": 213.0, "e2e_us": 962.2}))
    line = _moved(job, {"kernel_us": 253.2, "kernel_us_race_median": 256.4, "e2e_us": 818.2})
    assert "kernel_us 253.2 -> 213.0, kernel_us_race_median 256.4 -> 213.0" in line
    (out / "parsed" / "metrics.json").write_text(json.dumps({"kernel_us": 10.0}))
    assert "median" not in _moved(job, {"kernel_us": 12.0})


def test_ctrl_c_stops_the_watch_with_the_interrupt_exit_code(tmp_path, monkeypatch, capsys):
    """Ctrl-C is the usual end of a watch, and every ptolab command answers it with 130."""
    from pipeline import watch as watch_module
    from pipeline.cli import main
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "workflow.yaml").write_text("studies: []\n")
    touched = []
    monkeypatch.setattr(watch_module.Watch, "start", lambda self: None)
    monkeypatch.setattr(watch_module.Watch, "loop",
                        lambda self, *a: (_ for _ in ()).throw(KeyboardInterrupt))
    monkeypatch.setattr(watch_module.Watch, "finish_touch", lambda self: touched.append(1))
    monkeypatch.chdir(tmp_path)
    assert main(["watch", "--dir", str(tmp_path)]) == 130
    assert touched == [1]                      # the recording snakemake was waited for
    assert "stopped" in capsys.readouterr().err
