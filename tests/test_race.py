"""Races: one run of a stage is one draw of which schedule AICPU owns which chain.

A study marked ``race: true`` (or ``ptolab stage|simulate --race``) runs the program once per
factor of the chip's race (the hardware file's ``[race]``: per-action AICPU costs scaled
together); the files are the run of the chip as it is, and the metrics add each time's
median and range.  glm_attention at stitch 128 is the shipped case: four softmax chains on
three schedule threads, so its races are wide.
"""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import KERNELS, REPO, one_study_copy
from pipeline.workflow import load_plan
from simcore.spec.errors import ConfigError
from simcore.spec.hardware import load_hardware

needs_tools = pytest.mark.skipif(
    shutil.which("snakemake") is None or shutil.which("ptolab") is None,
    reason="needs the installed ptolab and snakemake commands")


def ptolab(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(["ptolab", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def without_race(dest: Path) -> Path:
    """A copy of the dav_2201 facts file with no [race] table."""
    facts = (REPO / "configs/hardware/dav_2201.toml").read_text()
    path = dest / "norace.toml"
    path.write_text(facts[:facts.index("\n[race]")] + "\n")
    return path


@needs_tools
def test_a_raced_stage_keeps_its_single_run_and_adds_the_race_median_and_range(tmp_path):
    """The run at factor 1.0 is the stage's own run (the simulator's record; the parsed times
    come from profiling files at the counter's resolution); the median is one of the runs
    and the range holds them all; parse carries the race metrics into parsed/metrics.json;
    at stitch 512 (eight chains on three schedule threads) the race moves the kernel by a few
    percent (3 % at the fit of 2026-12-05; over 10 % while each softmax step of an unrolled
    root call was a leaf task of its own, so 32 hops a chain instead of 4)."""
    out = tmp_path / "stage"
    proc = ptolab("stage", KERNELS / "glm_attention.yaml", "--race", "--out", out,
                  "--set", "runtime_options.stitch_function_max_num=512")
    assert proc.returncode == 0, proc.stderr
    assert "race variants" in proc.stdout
    race = json.loads((out / "run" / "race.json").read_text())
    hw = load_hardware("dav_2201")
    assert [r["factor"] for r in race["runs"]] == hw.race.factors
    assert race["paths"] == hw.race.paths
    record = json.loads((out / "run" / "metrics.json").read_text())
    parsed = json.loads((out / "parsed" / "metrics.json").read_text())
    for m in ("kernel_us", "e2e_us"):
        runs = sorted(r[m] for r in race["runs"])
        single = next(r[m] for r in race["runs"] if r["factor"] == 1.0)
        assert single == record[m]
        assert parsed[m] == pytest.approx(single, abs=0.05)     # 50 ticks per us
        assert parsed[f"{m}_race_median"] == runs[len(runs) // 2]
        assert (parsed[f"{m}_race_min"], parsed[f"{m}_race_max"]) == (runs[0], runs[-1])
        assert runs[0] <= single <= runs[-1]
    assert parsed["race_runs"] == len(hw.race.factors)
    assert parsed["kernel_us_race_max"] / parsed["kernel_us_race_min"] > 1.02
    assert parsed["sources"]["kernel_us_race_median"].startswith("metrics.json")


@needs_tools
def test_racing_on_a_chip_without_a_race_table_is_refused_before_anything_is_written(tmp_path):
    hw = without_race(tmp_path)
    out = tmp_path / "run"
    proc = ptolab("simulate", KERNELS / "sqrt_cast.yaml", "--hardware", hw, "--race",
                  "--out", out)
    assert proc.returncode == 2
    assert "[race]" in proc.stderr and "norace.toml" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_a_racing_study_on_a_chip_without_a_race_table_fails_at_planning(tmp_path):
    work = one_study_copy(tmp_path, "glm_attention_stitch")
    hw = without_race(tmp_path)
    shutil.copy(hw, work / "configs/hardware/dav_2201.toml")
    (work / "configs/hardware/dav_2201.fit.toml").unlink()
    with pytest.raises(ConfigError, match=r"field 'race'.*\[race\] table") as exc:
        load_plan(work / "configs", {"studies": ["glm_attention_stitch"], "results": "results"})
    assert "glm_attention_stitch.yaml" in str(exc.value)


@needs_tools
def test_the_workflow_races_the_stages_of_a_racing_study_only(tmp_path):
    """Snakemake's stage jobs pass --race for a study marked race, and not for others."""
    work = one_study_copy(tmp_path, "glm_attention_stitch")
    (work / "configs/workflow.yaml").write_text(
        "studies: [glm_attention_stitch, multi_stitch]\nresults: results\n")
    proc = subprocess.run(["snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work), "-n",
                           "-p", "-c1", "all"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    commands = [line for line in proc.stdout.splitlines() if "ptolab stage" in line]
    glm = [c for c in commands if "glm_attention.yaml" in c]
    other = [c for c in commands if "multi_stitch_add.yaml" in c]
    assert len(glm) == 3 and len(other) == 2
    assert all("--race" in c for c in glm) and not any("--race" in c for c in other)
