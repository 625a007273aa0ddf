"""`ptolab analyze`: upstream machine_perf_trace.py analyze, on fixtures and on our own runs."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.parse.analyze import (HEADER, Round, analyze, display_width, load_lanes,
                                    render, render_round)
from pipeline.parse.run import parse_run
from pipeline.runner import run_simulate
from simcore.spec.errors import ConfigError

FIXTURES = Path(__file__).parent / "fixtures" / "upstream"
PERF_FIXTURE = FIXTURES / "machine_trace_perf_data_0.json"


def _num(cell: str) -> float | None:
    return None if cell == "-" else float(cell)


def test_fixture_gives_upstream_table_line_for_line():
    expected = (FIXTURES / "analyze_round1.txt").read_text()
    assert render(analyze(load_lanes(PERF_FIXTURE))) == expected


def test_rows_follow_the_formulas():
    lanes = load_lanes(PERF_FIXTURE)
    [rnd] = analyze(lanes)
    ctrl, sched, core = rnd.rows
    assert [r[0] for r in rnd.rows] == ["AICPU-CTRL-0", "AICPU-SCHED-1", "AICore"]
    ends = {t["name"]: t["end"] for t in lanes[0]["tasks"]}
    build = (ends["DEV_TASK_BUILD_0(0)"] - ends["INIT_0"]) + \
            (ends["DEV_TASK_BUILD_0(1)"] - ends["DEV_TASK_BUILD_0(0)"])
    assert _num(ctrl[1]) == pytest.approx(build / 50)
    assert _num(ctrl[8]) == pytest.approx((ends["EXIT_0"] - ends["BEGIN_0"]) / 50)
    assert [c == "-" for c in sched[1:]] == [True, False, False, False, False, False, True, False]
    assert _num(core[7]) <= _num(core[8])


def test_a_file_without_round_suffixes_is_one_pseudo_round():
    lanes = [{"blockIdx": 0, "coreType": "AICPU-CTRL", "freq": 50,
              "tasks": [{"name": "BEGIN", "end": 100}, {"name": "DEV_TASK_BUILD(0)", "end": 150},
                        {"name": "EXIT", "end": 200}]}]
    [rnd] = analyze(lanes)
    assert rnd.name == "round1"
    assert rnd.rows[0][1] == "1.00" and rnd.rows[0][8] == "2.00"


def test_rounds_are_numbered_from_their_suffix_and_sorted():
    lane = {"blockIdx": 0, "coreType": "AICPU-CTRL", "freq": 1000, "tasks": [
        {"name": f"{p}_{r}", "end": 10_000 * r + i * 100}
        for r in (3, 1) for i, p in enumerate(("BEGIN", "INIT", "EXIT"))]}
    assert [r.name for r in analyze([lane])] == ["round2", "round4"]


def test_aicore_row_is_blank_without_exec_stamps():
    lanes = [{"blockIdx": 1, "coreType": "SCHED1-AIV", "freq": 50,
              "tasks": [{"name": "BEGIN_0", "end": 1}, {"name": "WAIT_EXIT_NOTIFY_0", "end": 9}]}]
    [rnd] = analyze(lanes)
    assert rnd.rows == [["AICore"] + ["-"] * 8]


def test_columns_use_east_asian_display_width():
    text = render_round(Round("round1", [["核心-0"] + ["-"] * 8]))
    widths = {display_width(line) for line in text.splitlines() if line}
    assert len(widths) == 1
    assert display_width("核心") == 4


def test_bad_inputs_are_one_paragraph(tmp_path):
    truncated = tmp_path / "machine_trace_perf_data_0.json"
    truncated.write_text(PERF_FIXTURE.read_text()[:200])
    with pytest.raises(ConfigError, match="truncated"):
        load_lanes(truncated)
    foreign = tmp_path / "other.json"
    foreign.write_text(json.dumps({"traceEvents": []}))
    with pytest.raises(ConfigError, match="does not look like"):
        load_lanes(foreign)
    with pytest.raises(ConfigError, match="not a directory"):
        load_lanes(tmp_path)


def _ptolab(*args, cwd=None):
    """The installed console script, as a user runs it (the module if it is not on PATH)."""
    exe = shutil.which("ptolab")
    cmd = [exe] if exe else [sys.executable, "-m", "pipeline.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=cwd)


def test_command_prints_input_then_tables():
    proc = _ptolab("analyze", str(PERF_FIXTURE))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"Analyzing input: {PERF_FIXTURE}"
    assert lines[1] == ""                      # upstream's title follows an empty line
    assert "round1" in lines[2] and set(lines[2].replace(" round1 ", "")) == {"="}
    assert len(lines[2]) == len(lines[3])


def test_command_errors_keep_upstream_wording(tmp_path):
    missing = _ptolab("analyze")
    assert missing.returncode == 2
    assert "Error: analyze requires an input json path" in missing.stderr
    nowhere = _ptolab("analyze", str(tmp_path / "nope.json"))
    assert nowhere.returncode == 2
    assert f"Error: path does not exist: {tmp_path / 'nope.json'}" in nowhere.stderr
    folder = _ptolab("analyze", str(tmp_path))
    assert folder.returncode == 2 and "Traceback" not in folder.stderr


@pytest.fixture(scope="module")
def msa_run(tmp_path_factory):
    """The upstream guard test's case: multi_stitch_add, stitch 64, 3 runs, DUMP_DEVICE_PERF."""
    out = tmp_path_factory.mktemp("guard")
    kernel = Path(__file__).resolve().parents[1] / "configs" / "kernels" / "multi_stitch_add.yaml"
    run_simulate(kernel, {"runtime_options.stitch_function_max_num": 64}, "dav_2201", out,
                 rounds=3, env={"DUMP_DEVICE_PERF": "true"})
    return out


def test_our_perf_file_passes_upstream_guard_test(msa_run):
    rounds = analyze(load_lanes(msa_run / "machine_trace_perf_data_0.json"))
    assert len(rounds) == 3
    for rnd in rounds:
        cells = [_num(c) for row in rnd.rows for c in row[1:] if c != "-"]
        assert all(0 <= v <= 1e9 for v in cells)
        ctrl = [r for r in rnd.rows if r[0].startswith("AICPU-CTRL")]
        sched = [r for r in rnd.rows if r[0].startswith("AICPU-SCHED")]
        core = [r for r in rnd.rows if r[0] == "AICore"]
        assert ctrl and sched and core
        assert all(ctrl[0][i] != "-" for i in (1, 6, 8)) and _num(ctrl[0][8]) > 0.01
        for row in sched:
            assert all(row[i] != "-" for i in (2, 3, 4, 5, 6, 8)) and _num(row[8]) > 0.01
        aic = core[0]
        assert all(aic[i] != "-" for i in (3, 6, 7, 8))
        assert _num(aic[7]) > 0.01 and _num(aic[8]) > 0.01
        assert _num(aic[7]) <= _num(aic[8]) * 1.01


def test_every_round_of_a_run_reads_the_same(msa_run):
    rounds = analyze(load_lanes(msa_run / "machine_trace_perf_data_0.json"))
    assert all(r.rows == rounds[0].rows for r in rounds)


def test_parse_run_writes_analyze_json(msa_run, tmp_path):
    parse_run(msa_run, tmp_path)
    data = json.loads((tmp_path / "analyze.json").read_text())
    assert data["header"] == HEADER
    assert [r["name"] for r in data["rounds"]] == ["round1", "round2", "round3"]
    assert all(len(row) == 9 for r in data["rounds"] for row in r["rows"])
