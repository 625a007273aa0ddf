"""Emitted files follow upstream's layouts, and parsing them gives back the metrics."""
import io
import json

import pytest

from pipeline.emit.atomic import write_text
from pipeline.parse.run import parse_run
from pipeline.runner import run_simulate

DEBUG = {"debug_options.runtime_debug_mode": 1}


@pytest.fixture
def run_dir(msa_path, tmp_path):
    out = tmp_path / "run"
    result = run_simulate(msa_path, {**DEBUG, "runtime_options.stitch_function_max_num": 16},
                          "dav_2201", out, rounds=2, env={"DUMP_DEVICE_PERF": "true"})
    return out, result


def test_switches_decide_which_files_exist(msa_path, tmp_path):
    run_simulate(msa_path, {}, "dav_2201", tmp_path / "plain", env={})
    assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == ["metrics.json"]


def test_dyn_topo_rows_follow_upstream_columns(run_dir):
    out, result = run_dir
    lines = (out / "dyn_topo.txt").read_text().splitlines()
    assert lines[0].startswith("seqNo,taskId,rootIndex,rootHash,opmagic,leafIndex,leafHash")
    rows = [list(map(int, line.split(","))) for line in lines[1:]]
    assert len(rows) == result.metrics["leaf_tasks"]
    assert {r[0] for r in rows} == set(range(8))               # 128 calls / stitch 16
    assert all(len(r) == 11 + 0 for r in rows)                 # no successors here
    assert all(r[7] == 0 for r in rows)                        # AIV


def test_merged_swimlane_is_a_chrome_trace_with_core_lanes(run_dir):
    out, _ = run_dir
    events = json.loads((out / "merged_swimlane.json").read_text())["traceEvents"]
    assert any(e.get("name") == "process_name" and e["args"]["name"] == "Machine View"
               and e["pid"] == 1 for e in events)
    lanes = {e["tid"]: e["args"]["name"] for e in events
             if e.get("name") == "thread_name" and e["pid"] == 1}
    # upstream's merger always opens core 0 for tasks the L1 file lacks (none here)
    assert lanes.pop(1000) == "Fake Core_0"
    assert lanes and all(name.startswith("AIV_") for name in lanes.values())
    tasks = [e for e in events if e["ph"] == "X"]
    tasks = [e for e in tasks if e["pid"] == 1]
    assert len(tasks) == 128 and all(e["tid"] in lanes and e["dur"] > 0 for e in tasks)
    assert all(e["name"].endswith("(add_one)") for e in tasks)
    assert any(e["ph"] == "C" and e["name"] == "ReadyCount_AIV" for e in events)


def test_perf_trace_has_a_round_per_launch(run_dir):
    out, _ = run_dir
    lanes = json.loads((out / "machine_trace_perf_data_0.json").read_text())
    kinds = [lane["coreType"] for lane in lanes]
    assert kinds[0] == "AICPU-CTRL" and "AICPU-SCHED" in kinds
    for lane in lanes:
        begins = [t for t in lane["tasks"] if t["name"].startswith("BEGIN_")]
        assert len(begins) == 2
        ends = [t["end"] for t in lane["tasks"]]
        assert ends == sorted(ends)
    ctrl = lanes[0]["tasks"]
    assert sum(t["name"].startswith("DEV_TASK_BUILD_0(") for t in ctrl) == 8


def _l1_stamps(out):
    cores = json.loads((out / "tilefwk_L1_prof_data.json").read_text())
    return [(c["blockIdx"], t["taskId"], t["execStart"], t["execEnd"])
            for c in cores for t in c["tasks"]]


def test_swimlane_files_hold_the_last_launch(run_dir, msa_path, tmp_path):
    """Every launch rewrites the L1 file, so after two launches it holds the second: the
    same tasks as a single launch's, each stamped one launch period later, the period
    the perf file puts between its two rounds; the merged swimlane's bars sit there too."""
    out, _ = run_dir
    once = tmp_path / "once"
    run_simulate(msa_path, {**DEBUG, "runtime_options.stitch_function_max_num": 16},
                 "dav_2201", once, rounds=1, env={"DUMP_DEVICE_PERF": "true"})
    twice, single = _l1_stamps(out), _l1_stamps(once)
    shifts = {a[2] - b[2] for a, b in zip(twice, single)} | \
        {a[3] - b[3] for a, b in zip(twice, single)}
    assert [a[:2] for a in twice] == [b[:2] for b in single] and len(shifts) == 1
    ctrl = json.loads((out / "machine_trace_perf_data_0.json").read_text())[0]["tasks"]
    begin = {t["name"]: t["end"] for t in ctrl if t["name"].startswith("BEGIN_")}
    assert shifts == {begin["BEGIN_1"] - begin["BEGIN_0"]} and shifts.pop() > 0
    events = json.loads((out / "merged_swimlane.json").read_text())["traceEvents"]
    bars = [e["ts"] for e in events if e.get("ph") == "X" and e.get("pid") == 1]
    assert min(bars) == pytest.approx(min(a[2] for a in twice) / 50.0)


def test_printed_summary_is_upstream_summary_of_the_l1_file(msa_path, tmp_path):
    """The AICORE Prof Summary is what upstream's print_aicore_summary computes from the
    L1 file (stamps over the 50 MHz counter), not the unrounded simulated times (at stitch
    64 the two differ in the second decimal)."""
    out = tmp_path / "run"
    result = run_simulate(msa_path, {**DEBUG, "runtime_options.stitch_function_max_num": 64},
                          "dav_2201", out, env={})
    stamps = [(s / 50.0, e / 50.0) for _, _, s, e in _l1_stamps(out)]
    cores = json.loads((out / "tilefwk_L1_prof_data.json").read_text())
    span = max(e for _, e in stamps) - min(s for s, _ in stamps)
    util = sum(e - s for s, e in stamps) / (len(cores) * span)
    assert f"AICore End-to-End Time: {span:.2f}" in result.summary
    assert f"AICore Utilization:     {util * 100:.2f}%" in result.summary


def test_parse_recomputes_metrics_from_files(run_dir, tmp_path):
    out, result = run_dir
    parsed = parse_run(out, tmp_path / "parsed")
    m = result.metrics
    for key in ("dev_tasks", "root_calls", "leaf_tasks", "leaf_functions"):
        assert parsed[key] == m[key]
    # files hold 50 MHz counter ticks: agreement within one tick per stamp
    assert parsed["kernel_us"] == pytest.approx(m["kernel_us"], abs=0.05)
    assert parsed["e2e_us"] == pytest.approx(m["e2e_us"], abs=0.05)
    assert parsed["sources"]["kernel_us"] == "merged_swimlane.json"
    assert parsed["sources"]["dev_tasks"] == "dyn_topo.txt"
    assert parsed["sources"]["e2e_us"].startswith("machine_trace_perf_data_")


def test_same_config_gives_byte_identical_files(msa_path, tmp_path):
    for name in ("a", "b"):
        run_simulate(msa_path, DEBUG, "dav_2201", tmp_path / name, env={"DUMP_DEVICE_PERF": "1"})
    for path in (tmp_path / "a").iterdir():
        assert path.read_bytes() == (tmp_path / "b" / path.name).read_bytes(), path.name


def test_atomic_write_leaves_old_file_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "f.json"
    write_text(target, "old")

    def crash(*_):
        raise OSError("disk full")

    monkeypatch.setattr("pipeline.emit.atomic.os.replace", crash)
    with pytest.raises(OSError):
        write_text(target, "new and longer")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]   # no temp file left behind


def test_open_bytes_writes_pieces_in_order_and_leaves_nothing_on_failure(tmp_path,
                                                                         monkeypatch):
    """The pieces go to the file in order (a thread writes them); an error in the block,
    or in a write, leaves the old file and no temp file."""
    from pipeline.emit.atomic import open_bytes
    target = tmp_path / "f.bin"
    pieces = [bytes([k % 251]) * (k * 997 % 5000) for k in range(300)]
    with open_bytes(target) as out:
        out.writelines(pieces[:100])
        for piece in pieces[100:]:
            out.write(memoryview(piece))
    assert target.read_bytes() == b"".join(pieces)
    with pytest.raises(ValueError, match="in the block"):
        with open_bytes(target) as out:
            out.write(b"x" * 10_000)
            raise ValueError("in the block")
    assert target.read_bytes() == b"".join(pieces)

    class Full(io.BufferedWriter):
        def write(self, data):
            raise OSError("disk full")

    monkeypatch.setattr("pipeline.emit.atomic.os.fdopen",
                        lambda fd, *a, **k: Full(io.FileIO(fd, "w")))
    with pytest.raises(OSError, match="disk full"):
        with open_bytes(target) as out:
            for piece in pieces:
                out.write(piece)
    assert target.read_bytes() == b"".join(pieces)
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]
