"""PMU counters (PYPTO_PROF_PMU_EVENT_TYPE), pmu-to-csv, and PMU Trace."""
import csv
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pipeline.emit.pmu import EVENTS, SLOTS, pmu_group
from pipeline.emit.pmu_trace import MAX_CORES, pmu_id
from pipeline.parse.pmu import COLUMNS, FIXED, csv_text, read_pmu
from pipeline.parse.run import parse_run
from pipeline.runner import run_simulate
from simcore.spec.errors import ConfigError

KERNEL = Path(__file__).resolve().parents[1] / "configs" / "kernels" / "multi_stitch_add.yaml"
FIXTURES = Path(__file__).parent / "fixtures" / "upstream"
DATA = Path("PROF_000001") / "device_0" / "data"
STITCH = {"runtime_options.stitch_function_max_num": 16}
PIPES_2201 = {"vec_busy_cycles": "vector", "cube_busy_cycles": "cube",
              "mte2_busy_cycles": "mte2", "mte3_busy_cycles": "mte3"}


def _ptolab(*args):
    exe = shutil.which("ptolab")
    cmd = [exe] if exe else [sys.executable, "-m", "pipeline.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True)


def _entries(path: Path):
    """Decode the PMU records straight from the msprof layout (not through our parser);
    the LOG records (data type 2) beside them are checked in test_upstream_readers.py."""
    raw = path.read_bytes()
    assert len(raw) % 256 == 0
    out = []
    for off in range(0, len(raw), 256):
        magic, level, kind, thread, data_len, _ = struct.unpack_from("<HHIIIQ", raw, off)
        head_magic, bits, _, _, cnt = struct.unpack_from("<HHIHB", raw, off + 24)
        assert (magic, level, kind, head_magic) == (0x5A5A, 6000, 10, 0x6BD3)
        assert bits >> 10 in (2, 3)
        if bits >> 10 == 2:
            continue
        assert 1 <= cnt <= 3 and data_len == 40 + 56 * cnt
        for i in range(cnt):
            seq, task, total, *cnts = struct.unpack_from("<IIQ10I", raw, off + 64 + 56 * i)
            out.append((thread, bits & 0x7F, (bits >> 7) & 7, seq, task, total, cnts))
    return out


@pytest.fixture(scope="module")
def pmu_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pmu")
    result = run_simulate(KERNEL, STITCH, "dav_2201", out,
                          env={"PYPTO_PROF_PMU_EVENT_TYPE": "2"})
    return out, result


def test_env_group_and_upstream_warnings(capsys):
    assert pmu_group({}) is None                         # no msprof, no PMU
    assert pmu_group({"PTOLAB_MSPROF_TASK_TIME": "l3"}) == 2
    assert "Dont support PYPTO_PROF_PMU_EVENT_TYPE env, use default pmu event type " \
           "PIPE_UTILIZATION." in capsys.readouterr().err
    assert pmu_group({"PYPTO_PROF_PMU_EVENT_TYPE": "abc"}) == 2
    assert "Invalid PYPTO_PROF_PMU_EVENT_TYPE value [abc], use default PIPE_UTILIZATION." \
        in capsys.readouterr().err
    assert pmu_group({"PYPTO_PROF_PMU_EVENT_TYPE": "3"}) == 3
    assert "Invalid profPmuType 3, only support [1,2,4,5,6,7,8]." in capsys.readouterr().err
    for g in (1, 2, 4, 5, 6, 7, 8):
        assert pmu_group({"PYPTO_PROF_PMU_EVENT_TYPE": str(g)}) == g
    assert capsys.readouterr().err == ""


def test_records_follow_the_256_byte_layout(pmu_run):
    out, result = pmu_run
    files = list((out / DATA).glob("*aicpu.data*"))
    assert len(files) == 1
    entries = _entries(files[0])
    assert len(entries) == result.metrics["leaf_tasks"]
    tl, p = result.timeline, result.program
    assert sorted((e[3], e[4]) for e in entries) == \
        sorted(zip(p.task_dev_task.tolist(), (p.task_id & ((1 << 26) - 1)).tolist()))
    assert all(e[2] == (0 if e[1] >= tl.aic_cores else 1) for e in entries)   # AIV=0, AIC=1


def test_counters_come_from_the_timeline(pmu_run):
    out, result = pmu_run
    tl = result.timeline
    entries = _entries(next((out / DATA).glob("*aicpu.data*")))
    order = np.lexsort((tl.task_start, tl.task_core))
    totals = np.rint((tl.task_end - tl.task_start) * tl.clock_mhz)[order]
    assert [e[5] for e in entries] == totals.astype(int).tolist()
    vector = np.rint(tl.task_pipe_cycles["vector"])[order]
    mte2 = np.rint(tl.task_pipe_cycles["mte2"])[order]
    assert [e[6][0] for e in entries] == vector.astype(int).tolist()     # vec_busy_cycles
    assert [e[6][4] for e in entries] == mte2.astype(int).tolist()       # mte2_busy_cycles
    assert all(sum(e[6][:6]) <= e[5] for e in entries)                   # busy <= total
    assert all(e[6][8] == e[6][9] == 0 for e in entries)                 # dav_2201: 8 slots


def test_unknown_group_leaves_every_slot_zero(tmp_path, capsys):
    run_simulate(KERNEL, STITCH, "dav_2201", tmp_path, env={"PYPTO_PROF_PMU_EVENT_TYPE": "3"})
    assert "Invalid profPmuType 3" in capsys.readouterr().err
    entries = _entries(next((tmp_path / DATA).glob("*aicpu.data*")))
    assert entries and all(not any(e[6]) and e[5] > 0 for e in entries)


def test_memory_group_counts_requests_from_bytes(tmp_path):
    result = run_simulate(KERNEL, STITCH, "dav_2201", tmp_path,
                          env={"PYPTO_PROF_PMU_EVENT_TYPE": "4"})
    rows = read_pmu(tmp_path / DATA)
    header, *_ = csv_text(rows, 4, "dav_2201").splitlines()
    assert header.split(",")[len(FIXED):] == COLUMNS["dav_2201"][4]
    reads = sum(int(np.ceil(b / 32)) for b in result.program.task_read_bytes)
    assert sum(r[8 + 4] for r in rows) == reads                          # l2_read_req
    assert all(r[8 + 0] == r[8 + 1] for r in rows if r[4] == 0)          # AIV: UB in == out


def test_every_group_has_a_column_per_named_slot():
    for arch, groups in EVENTS.items():
        for g, events in groups.items():
            assert len(events) <= SLOTS[arch]
            assert len(COLUMNS[arch][g]) <= len(events)
    assert len(COLUMNS["dav_3510"][4]) == 8 and len(EVENTS["dav_3510"][4]) == 10


def test_hand_written_upstream_records_give_the_expected_csv(tmp_path):
    proc = _ptolab("pmu-to-csv", "-p", str(FIXTURES / "pmu_data"), "-pe", "2",
                   "--arch", "dav_2201", "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    got = (tmp_path / "tilefwk_prof_pmu.csv").read_text()
    assert got == (FIXTURES / "tilefwk_prof_pmu_g2_dav_2201.csv").read_text()


def test_command_on_our_own_run(pmu_run, tmp_path):
    out, result = pmu_run
    proc = _ptolab("pmu-to-csv", "-p", str(out / DATA), "-pe", "2", "--arch", "dav_2201",
                   "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "tilefwk_prof_pmu.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == result.metrics["leaf_tasks"]
    assert list(rows[0])[:7] == FIXED
    assert list(rows[0])[7:] == COLUMNS["dav_2201"][2]
    bad = _ptolab("pmu-to-csv", "-p", str(out), "-pe", "9")
    assert bad.returncode == 2                                           # argparse choices


def test_bad_data_folders_are_one_paragraph(tmp_path):
    with pytest.raises(ConfigError, match="no \\*aicpu.data\\* file"):
        read_pmu(tmp_path)
    (tmp_path / "aicpu.data.0.slice_0").write_bytes(
        (FIXTURES / "pmu_data" / "aicpu.data.0.slice_0").read_bytes()[:300])
    with pytest.raises(ConfigError, match="truncated"):
        read_pmu(tmp_path)
    (tmp_path / "aicpu.data.0.slice_0").write_bytes(b"\0" * 512)
    with pytest.raises(ConfigError, match="no PyPTO PMU record"):
        read_pmu(tmp_path)


def test_parse_run_writes_the_pmu_table(pmu_run, tmp_path):
    out, result = pmu_run
    parse_run(out, tmp_path)
    table = pl.read_parquet(tmp_path / "pmu.parquet")
    assert table.height == result.metrics["leaf_tasks"]
    for col in ("core", "core_type", "total_cycles", "pipe_vector", "pipe_mte2", "pipe_cube"):
        assert col in table.columns
    assert set(table["core_type"]) <= {"AIC", "AIV"}
    busy = table.select(pl.sum_horizontal("pipe_vector", "pipe_mte2", "pipe_mte3"))
    assert (busy.to_series() <= table["total_cycles"]).all()


# -- PMU Trace -------------------------------------------------------------------------------

def test_pmu_id_rule():
    assert pmu_id(9876543210123, True) == 1123
    assert pmu_id(9876543210058, False) == 58          # canonical decimal, not octal "058"
    assert all(0 <= pmu_id(h, m) < 2000 for h in (5, 10**18 + 999) for m in (True, False))


@pytest.fixture(scope="module")
def trace_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("trace")
    result = run_simulate(KERNEL, {**STITCH, "codegen_options.enable_pmu_trace": True},
                          "dav_3510", out, env={})
    path = out / "PROF_000001" / "mindstudio_profiler_output" / "msprof_000001.json"
    return json.loads(path.read_text())["traceEvents"], result


def test_pmu_trace_has_pipe_lanes_for_at_most_six_cores(trace_run):
    events, result = trace_run
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert 1 <= len(procs) <= MAX_CORES
    assert len(procs) == min(MAX_CORES, len(np.unique(result.timeline.task_core)))
    for pid in procs:
        lanes = [e["args"]["name"] for e in events
                 if e.get("name") == "thread_name" and e["pid"] == pid]
        assert lanes == ["MTE2", "MTE1", "Cube", "Vector", "FIXP", "MTE3", "Scalar"]


def test_pmu_trace_pipe_work_sits_inside_its_task(trace_run):
    events, result = trace_run
    tl, program, hw = result.timeline, result.program, result.hardware
    base = 1_000_000 / hw.aicpu.profile_freq_mhz
    work = [e for e in events if e["ph"] == "X"]
    assert work
    for e in work:
        core = e["pid"] - 1
        on_core = np.flatnonzero((tl.task_core == core) & (program.task_dev_task ==
                                                           e["args"]["seqNo"]))
        t = on_core[program.task_id[on_core] == e["args"]["taskId"]][0]
        assert e["ts"] >= base + tl.task_start[t] + hw.core.head_overhead_us - 1e-6
        assert e["ts"] + e["dur"] <= base + tl.task_end[t] + 1e-6
    vector = [e for e in work if e["tid"] == 3]
    mte2 = [e for e in work if e["tid"] == 0]
    assert vector and mte2


def test_pmu_trace_marks_entry_and_exit_of_every_task(trace_run):
    events, result = trace_run
    stamps = [e for e in events if e["ph"] == "i"]
    tasks_shown = sum(1 for e in events if e["ph"] == "X" and e["tid"] == 0)   # one MTE2 each
    assert len(stamps) == 4 * tasks_shown
    assert {e["tid"] for e in stamps} == {0, 5}                          # PIPE_MTE2, PIPE_MTE3
    leaf = result.program.leaf_functions[0]
    assert all(e["args"]["pmu_id"] == pmu_id(leaf.hash, True) for e in stamps)


def test_parse_run_reads_the_pmu_trace_into_a_pipe_timeline(trace_run, tmp_path):
    events, _ = trace_run
    run_dir = tmp_path / "run"
    run_simulate(KERNEL, {**STITCH, "codegen_options.enable_pmu_trace": True}, "dav_3510",
                 run_dir, env={"PYPTO_PROF_PMU_EVENT_TYPE": "4"})
    parse_run(run_dir, tmp_path / "parsed")
    pipes = pl.read_parquet(tmp_path / "parsed" / "pipe_timeline.parquet")
    assert pipes.height == sum(1 for e in events if e["ph"] == "X")
    assert set(pipes["pipe"]) <= {"MTE2", "MTE1", "Cube", "Vector", "FIXP", "MTE3", "Scalar"}
    assert (pipes["dur_us"] > 0).all() and pipes["core"].n_unique() <= MAX_CORES
    pmu = pl.read_parquet(tmp_path / "parsed" / "pmu.parquet")
    assert not [c for c in pmu.columns if c.startswith("pipe_")]     # group 4 has no pipes


def test_pmu_trace_elsewhere_is_a_clear_message(tmp_path, capsys):
    run_simulate(KERNEL, {**STITCH, "codegen_options.enable_pmu_trace": True}, "dav_2201",
                 tmp_path, env={})
    assert "only on dav_3510" in capsys.readouterr().err
    assert not list(tmp_path.glob("PROF_*/mindstudio_profiler_output/*"))


def test_pmu_outputs_are_byte_identical(tmp_path):
    env = {"PYPTO_PROF_PMU_EVENT_TYPE": "2"}
    sets = {**STITCH, "codegen_options.enable_pmu_trace": True}
    for name in ("a", "b"):
        run_simulate(KERNEL, sets, "dav_3510", tmp_path / name, env=env)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("PROF_*/**/*")
                   if p.is_file())
    assert files
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
               for f in files)


def test_overlapped_pipes_keep_their_busy_time_inside_the_task():
    from types import SimpleNamespace

    from pipeline.emit.pmu_trace import pipe_intervals
    clock = 1000.0
    # task 0: 3 us of pipe work in a 2 us window (the machine overlapped); task 1 fits serially
    tl = SimpleNamespace(clock_mhz=clock, task_start=np.array([0.0, 10.0]),
                         task_end=np.array([2.5, 13.0]),
                         task_pipe_cycles={"mte2": np.array([1500.0, 1000.0]),
                                           "vector": np.array([500.0, 500.0]),
                                           "mte3": np.array([1000.0, 500.0])})
    task, lane, start, stop = pipe_intervals(tl, np.array([0, 1]), head_us=0.5)
    for t, window in ((0, (0.5, 2.5)), (1, (10.5, 13.0))):
        mine = task == t
        assert (start[mine] >= window[0] - 1e-9).all() and (stop[mine] <= window[1] + 1e-9).all()
        busy = {int(k): e - s for k, s, e in zip(lane[mine], start[mine], stop[mine])}
        assert busy == pytest.approx({0: tl.task_pipe_cycles["mte2"][t] / clock,
                                      3: tl.task_pipe_cycles["vector"][t] / clock,
                                      5: tl.task_pipe_cycles["mte3"][t] / clock})
    assert stop[task == 0].max() == pytest.approx(2.5)          # the last pipe ends with the task
    serial = np.sort(start[task == 1])
    assert serial.tolist() == pytest.approx([10.5, 11.5, 12.0])  # back to back: MTE2, Vector, MTE3
