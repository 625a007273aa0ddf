"""DUMP_DEVICE_PERF: round files, limits and warnings, the AICPU view and its merge."""
import json
import re
from pathlib import Path

import pytest

from pipeline.emit.operator_trace import operator_trace
from pipeline.emit.perf_trace import devtask_limit
from pipeline.parse.analyze import parse_name
from pipeline.runner import run_simulate
from simcore.spec.errors import ConfigError

KERNEL = Path(__file__).resolve().parents[1] / "configs" / "kernels" / "multi_stitch_add.yaml"
FIXTURE = Path(__file__).parent / "fixtures" / "upstream" / "machine_trace_perf_data_0.json"
PERF = {"DUMP_DEVICE_PERF": "true"}
DEBUG = {"debug_options.runtime_debug_mode": 1}


def _stitch(n):
    return {"runtime_options.stitch_function_max_num": n}


def _rounds(lane):
    return sorted({parse_name(t["name"])[1] for t in lane["tasks"]})


def test_a_file_every_fifty_rounds(tmp_path):
    run_simulate(KERNEL, _stitch(64), "dav_2201", tmp_path, rounds=120, env=PERF)
    files = sorted(tmp_path.glob("machine_trace_perf_data_*.json"),
                   key=lambda p: int(p.stem.rsplit("_", 1)[1]))
    assert [p.name for p in files] == [f"machine_trace_perf_data_{n}.json" for n in (0, 50, 100)]
    for path, first, last in zip(files, (0, 50, 100), (49, 99, 119)):
        for lane in json.loads(path.read_text()):
            assert _rounds(lane) == list(range(first, last + 1))
            assert sum(t["name"].startswith("BEGIN") for t in lane["tasks"]) == last - first + 1
        assert (tmp_path / f"machine_runtime_operator_trace_{first}.json").exists()


def test_at_most_two_hundred_rounds_with_upstream_warning(tmp_path, capsys):
    run_simulate(KERNEL, _stitch(64), "dav_2201", tmp_path, rounds=230, env=PERF)
    err = capsys.readouterr().err
    assert "Aicpu perf info more than maxTurnNum=200, some info would be lost" in err
    files = list(tmp_path.glob("machine_trace_perf_data_*.json"))
    assert len(files) == 4
    last = json.loads((tmp_path / "machine_trace_perf_data_150.json").read_text())
    assert max(max(_rounds(lane)) for lane in last) == 199


def _builds(path, round_no=0):
    ctrl = json.loads(path.read_text())[0]
    return [t for t in ctrl["tasks"] if t["name"].startswith(f"DEV_TASK_BUILD_{round_no}(")]


def test_dev_task_limit_defaults_to_the_tuning_guides_twenty(tmp_path, capsys):
    run_simulate(KERNEL, _stitch(1), "dav_2201", tmp_path, env=PERF)     # 128 dev tasks
    assert "Dev task num larger than: 20, the excess part will not be recorded" \
        in capsys.readouterr().err
    lanes = json.loads((tmp_path / "machine_trace_perf_data_0.json").read_text())
    assert len(_builds(tmp_path / "machine_trace_perf_data_0.json")) == 20
    for lane in lanes[1:]:
        if lane["coreType"] == "AICPU-SCHED":
            rcv = [t for t in lane["tasks"] if t["name"].startswith("DEV_TASK_RCV_0(")]
            assert len(rcv) == 20


def test_dev_task_limit_is_a_setting(tmp_path, capsys):
    run_simulate(KERNEL, _stitch(1), "dav_2201", tmp_path,
                 env={**PERF, "PTOLAB_PERF_DEVTASK_MAX": "200"})
    assert "Dev task num larger than" not in capsys.readouterr().err
    assert len(_builds(tmp_path / "machine_trace_perf_data_0.json")) == 128
    with pytest.raises(ConfigError, match="PTOLAB_PERF_DEVTASK_MAX"):
        devtask_limit({"PTOLAB_PERF_DEVTASK_MAX": "lots"})
    assert devtask_limit({}) == 20


def test_stamps_are_phase_ends_in_order_with_integer_freq(tmp_path):
    run_simulate(KERNEL, _stitch(16), "dav_3510", tmp_path, rounds=2, env=PERF)
    lanes = json.loads((tmp_path / "machine_trace_perf_data_0.json").read_text())
    assert lanes[0]["coreType"] == "AICPU-CTRL" and lanes[0]["blockIdx"] == 0
    assert all(lane["freq"] == 1000 and isinstance(lane["freq"], int) for lane in lanes)
    cores = [lane for lane in lanes if re.fullmatch(r"SCHED\d+-AI[CV]", lane["coreType"])]
    assert [lane["blockIdx"] for lane in cores] == list(range(1, len(cores) + 1))
    for lane in lanes:
        ends = [t["end"] for t in lane["tasks"]]
        assert ends == sorted(ends)
        assert all(parse_name(t["name"]) is not None for t in lane["tasks"])


def test_operator_trace_follows_gen_perfetto():
    lanes = json.loads(FIXTURE.read_text())
    events = operator_trace(lanes)["traceEvents"]
    assert events[0] == {"args": {"name": "AICPU View", "type": "aicpu"}, "cat": "__metadata",
                         "name": "process_name", "ph": "M", "pid": 0}
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert names == {0: "AICPU-CTRL-0", 1: "AICPU-SCHED-1", 2: "SCHED1-AIC-1"}
    phases = [e for e in events if e["ph"] == "X"]
    assert len(phases) == sum(len(lane["tasks"]) for lane in lanes)
    begin = next(e for e in phases if e["tid"] == 0 and e["name"] == "BEGIN_0")
    assert begin["ts"] == pytest.approx(19.98) and begin["dur"] == pytest.approx(0.02)
    build = next(e for e in phases if e["name"] == "DEV_TASK_BUILD_0(0)")
    assert (build["ts"], build["dur"]) == (pytest.approx(22.0), pytest.approx(8.0))
    assert all(e["pid"] == 0 and e["freq"] == 50 and e["dur"] > 0 for e in phases)


def test_equal_ends_are_pushed_one_cycle_apart():
    lane = {"blockIdx": 1, "coreType": "AICPU-SCHED", "freq": 50, "tasks": [
        {"name": "BEGIN_0", "end": 100}, {"name": "ALLOC_THREAD_ID_0", "end": 100},
        {"name": "INIT_0", "end": 100}]}
    xs = [e for e in operator_trace([lane])["traceEvents"] if e["ph"] == "X"]
    ends = [round((e["ts"] + e["dur"]) * 50) for e in xs]
    assert ends == [100, 101, 102]


def test_both_switches_prepend_the_aicpu_view_to_the_swimlane(tmp_path):
    run_simulate(KERNEL, {**DEBUG, **_stitch(64)}, "dav_2201", tmp_path, rounds=2, env=PERF)
    merged = json.loads((tmp_path / "merged_swimlane.json").read_text())["traceEvents"]
    view = json.loads((tmp_path / "machine_runtime_operator_trace_0.json").read_text())
    assert merged[:len(view["traceEvents"])] == view["traceEvents"]
    machine = [e for e in merged if e.get("pid") == 1 and e["ph"] == "X"]
    assert machine, "the AICore tasks are still there"
    # same absolute time base: the AICore tasks are the last launch's (every launch
    # rewrites the L1 file), so the second round's AICPU run encloses them
    ctrl = {e["name"]: e for e in view["traceEvents"] if e.get("tid") == 0 and e["ph"] == "X"}
    first_task = min(e["ts"] for e in machine)
    last_task = max(e["ts"] + e["dur"] for e in machine)
    assert ctrl["EXIT_0"]["ts"] + ctrl["EXIT_0"]["dur"] < ctrl["BEGIN_1"]["ts"] <= first_task
    assert last_task <= ctrl["EXIT_1"]["ts"] + ctrl["EXIT_1"]["dur"] + 1e-6


def test_same_input_gives_byte_identical_perf_files(tmp_path):
    for name in ("a", "b"):
        run_simulate(KERNEL, {**DEBUG, **_stitch(32)}, "dav_2201", tmp_path / name, rounds=3,
                     env=PERF)
    for f in ("machine_trace_perf_data_0.json", "machine_runtime_operator_trace_0.json",
              "merged_swimlane.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
