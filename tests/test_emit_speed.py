"""The streaming writers of the big files give the bytes json.dumps gives for the same
data (the nightly baselines and upstream readers hash and parse them), and they do it
without reading back what they wrote or holding the whole document."""
import dataclasses
import json
import math
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.emit import jsontext as jt
from pipeline.emit import operator_trace as ot
from pipeline.emit import perf_trace as pt
from pipeline.emit import swimlane as sw
from pipeline.runner import compile_for, resolve_kernel, simulate_program, size_check
from simcore.machine import simulate
from simcore.spec.hardware import load_hardware

from conftest import draw_task_view

KERNELS = Path(__file__).resolve().parents[1] / "configs" / "kernels"
DEBUG = {"debug_options.runtime_debug_mode": 1}
ODD = 'q"uo\\te %d %s {x}\n\ttab ünï 字 \x01'      # what a label could hold that JSON escapes


def _reference(obj, indent) -> bytes:
    """What atomic.write_json wrote before the writers streamed."""
    return (json.dumps(obj, indent=indent, ensure_ascii=False) + "\n").encode("utf-8")


def _run(name, overrides=None):
    path = KERNELS / f"{name}.yaml"
    kernel = resolve_kernel(path, {**DEBUG, **(overrides or {})})
    hw = load_hardware("dav_2201")
    program = compile_for(kernel, hw, path, size_check(kernel, path))
    return kernel, hw, program, simulate(hw, program, kernel.options.runtime_options)


# glm_attention: dependencies across several dev tasks; multi_stitch_add at stitch 1: a dev
# task per call; softmax: many dependencies in one dev task
CASES = {"glm_attention": {}, "multi_stitch_add": {"runtime_options.stitch_function_max_num": 1},
         "softmax": {}}


@pytest.fixture(scope="module", params=sorted(CASES))
def run(request):
    return _run(request.param, CASES[request.param])


@pytest.fixture(params=[7, None], ids=["slices_of_7", "default_slices"])
def sliced(request, monkeypatch):
    """Write in slices of 7 records too, so slice boundaries fall inside every run."""
    if request.param:
        monkeypatch.setattr(jt, "CHUNK", request.param)


def _odd_labels(program):
    """The program with labels and merge info that need escaping (and '%', '{}')."""
    leaves = [dataclasses.replace(f, label=f"{f.label}{ODD}",
                                  merge_info=(*f.merge_info, ODD) if k % 2 else ())
              for k, f in enumerate(program.leaf_functions)]
    return dataclasses.replace(program, leaf_functions=leaves)


def _views(tl, freq, rounds, out):
    views = []
    pt.write_perf_files(tl, freq, rounds, 5.0, out, aicpu_views=views)
    return views


def test_l1_prof_data_bytes(run, tmp_path, sliced):
    _, hw, program, tl = run
    freq = hw.aicpu.profile_freq_mhz
    sw.write_l1_prof_data(program, tl, freq, tmp_path / "l1.json")
    assert (tmp_path / "l1.json").read_bytes() == _reference(sw.l1_prof_data(program, tl, freq), 4)


@pytest.mark.parametrize("odd", [False, True])
def test_merged_swimlane_bytes(run, tmp_path, odd, sliced):
    _, hw, program, tl = run
    program = _odd_labels(program) if odd else program
    freq = hw.aicpu.profile_freq_mhz
    sw.write_merged_swimlane(program, tl, freq, tmp_path / "m.json")
    assert (tmp_path / "m.json").read_bytes() == \
        _reference(sw.merged_swimlane(program, tl, freq), None)


def test_merged_swimlane_with_aicpu_views_is_what_prepending_file_by_file_gave(run, tmp_path,
                                                                           sliced):
    """Three perf files (120 rounds): upstream prepends each view in turn, so the last
    file's events come first; the old writer read the swimlane back each time."""
    _, hw, program, tl = run
    freq = hw.aicpu.profile_freq_mhz
    views = _views(tl, freq, 120, tmp_path)
    assert len(views) == 3
    ref = tmp_path / "ref.json"
    ref.write_bytes(_reference(sw.merged_swimlane(program, tl, freq), None))
    for n in (0, 50, 100):
        trace = json.loads((tmp_path / f"machine_runtime_operator_trace_{n}.json").read_text())
        ot.prepend_to_swimlane(ref, trace["traceEvents"])
    sw.write_merged_swimlane(program, tl, freq, tmp_path / "m.json", views)
    assert (tmp_path / "m.json").read_bytes() == ref.read_bytes()


def test_perf_and_view_file_bytes(run, tmp_path, sliced):
    _, hw, program, tl = run
    freq = hw.aicpu.profile_freq_mhz
    _views(tl, freq, 60, tmp_path)
    lanes, _ = pt.lane_templates(tl, freq, pt.DEVTASK_LIMIT_DEFAULT)
    span = int(math.ceil((tl.e2e_us + 5.0) * freq))
    for first, rounds in ((0, range(0, 50)), (50, range(50, 60))):
        data = pt.perf_lanes(lanes, rounds, span)
        assert (tmp_path / f"machine_trace_perf_data_{first}.json").read_bytes() == \
            _reference(data, 4)
        assert (tmp_path / f"machine_runtime_operator_trace_{first}.json").read_bytes() == \
            _reference(ot.operator_trace(data), 2)


def test_view_and_perf_writers_escape_and_fall_back(tmp_path):
    """Odd names, a float rate, an empty lane and an event of another shape."""
    lanes = [{"blockIdx": 3, "coreType": ODD, "freq": 37.5,
              "tasks": [{"name": f"BEGIN_0{ODD}", "end": 40}, {"name": "EXIT_0", "end": 40}]},
             {"blockIdx": 4, "coreType": "AICPU-SCHED", "freq": 50, "tasks": []}]
    pt.write_perf_data(tmp_path / "p.json", lanes)
    assert (tmp_path / "p.json").read_bytes() == _reference(lanes, 4)
    trace = ot.operator_trace(lanes)
    trace["traceEvents"].append({"name": "odd", "ph": "X", "ts": 1.5, "args": {"k": [1, None]}})
    ot.write_operator_trace(tmp_path / "v.json", trace)
    assert (tmp_path / "v.json").read_bytes() == _reference(trace, 2)
    pt.write_perf_data(tmp_path / "e.json", [])
    ot.write_operator_trace(tmp_path / "ev.json", {"traceEvents": []})
    assert (tmp_path / "e.json").read_bytes() == _reference([], 4)
    assert (tmp_path / "ev.json").read_bytes() == _reference({"traceEvents": []}, 2)


@pytest.mark.parametrize("x", [0, -3, 2 ** 70, True, False, 0.1, 1e16, -2.5e-7, 5.0,
                               float("nan"), float("inf"), -float("inf")])
def test_scalars_as_json_writes_them(x):
    assert jt.number(x) == json.dumps(x)
    assert jt.indented({"a": [x, {"b": ODD}]}, 2, 3).strip() == \
        json.dumps({"a": [x, {"b": ODD}]}, indent=2, ensure_ascii=False).replace("\n", "\n      ")


def test_the_swimlane_is_never_read_back(tmp_path, monkeypatch):
    """With perf files and swimlanes on, the merged swimlane is written once, whole."""
    def read_back(*_a, **_k):
        raise AssertionError("merged_swimlane.json read back")

    monkeypatch.setattr(ot, "prepend_to_swimlane", read_back)
    monkeypatch.setattr(json, "loads", read_back)
    kernel, hw, program, _ = _run("multi_stitch_add")
    out = tmp_path / "run"
    simulate_program(kernel, hw, program, out, 60, {"DUMP_DEVICE_PERF": "true"},
                     size_check(kernel, KERNELS / "multi_stitch_add.yaml"))
    monkeypatch.undo()
    events = json.loads((out / "merged_swimlane.json").read_text())["traceEvents"]
    assert events[0]["args"]["name"] == "AICPU View" and any(e.get("cat") == "event"
                                                             for e in events)


def test_writing_the_merged_swimlane_holds_a_slice_not_the_document(tmp_path, monkeypatch):
    """20 000 tasks in slices of 500: peak Python memory while writing stays below the
    file's size (per-task columns only; the old writer held every event as a dict, about
    four times the file, before encoding it)."""
    _, hw, program, tl = _run("bench_1m", {"params.CALLS": 20})
    freq = hw.aicpu.profile_freq_mhz
    monkeypatch.setattr(jt, "CHUNK", 500)
    tracemalloc.start()
    try:
        sw.write_merged_swimlane(program, tl, freq, tmp_path / "m.json")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = (tmp_path / "m.json").stat().st_size
    assert size > 10_000_000
    assert peak < size, (peak, size)


def test_kernels_exercise_edges_and_dev_tasks(run):
    """The byte tests above mean something only if the walk meets dependencies or
    several dev tasks."""
    _, _, program, _ = run
    v = sw.TaskView.of(program)
    assert v.edge_src.size > 0 or np.unique(v.seq).size > 1


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_counter_walk_on_columns_matches_the_event_loop(data):
    """Random dev tasks, edges and stamps with many ties: the column walk writes what
    ready_counters' loop gives."""
    v, order, start, length = draw_task_view(data, 40, 30, 8)
    freq = 1.5
    start_c, end_c = start * 7, (start + length) * 7
    want = jt.compact_items(sw.ready_counters(v, order, start_c, end_c, freq))
    assert b", ".join(p for p in sw._counter_texts(v, order, start_c, end_c, freq)
                     if p).decode() == want


def _bubble_log_as_upstream(program, timeline, freq):
    """bubble_analysis.log as upstream's analysis_wait_cycles computes it, task by task in
    plain Python from the L1 file's stamps (tools/profiling/draw_swim_lane.py)."""
    from pipeline.emit.tasks import dev_task_successors
    from pipeline.formats import swimlane as fmt
    from pipeline.formats.cores import kind_of_block
    from pipeline.formats.task_id import task_key
    v, tl = sw.TaskView.of(program), timeline
    start = [c / freq for c in sw.to_cycles(tl.task_start, freq).tolist()]
    end = [c / freq for c in sw.to_cycles(tl.task_end, freq).tolist()]
    preds = {t: [] for t in range(v.size)}
    for a, b in zip(*[x.tolist() for x in dev_task_successors(v)[:2]]):
        preds[b].append(a)
    first = min(start) if start else 0.0
    name = [fmt.task_name(int(v.seq[t]), int(v.task_id[t]), int(v.root[t]), int(v.op[t]),
                          v.labels[v.leaf[t]]) for t in range(v.size)]
    key = [task_key(int(v.seq[t]), int(v.task_id[t])) for t in range(v.size)]
    blocks = [fmt.bubble_core_block(fmt.FAKE_CORE, -1, 0, first - first, 0, 0, [])]
    every = []
    for block in sorted(set(tl.task_core.tolist())):
        tasks = sorted((t for t in range(v.size) if tl.task_core[t] == block),
                       key=lambda t: (start[t], t))
        last, total, sched, waits = first, 0, 0, []
        for t in tasks:
            ready = max([first] + [end[p] for p in preds[t]])
            wait = start[t] - max(last, ready)
            sched += wait
            total += start[t] - last
            last = end[t]
            waits.append((wait, t))
        every += waits
        top = sorted(waits, key=lambda w: w[0], reverse=True)[:3]
        blocks.append(fmt.bubble_core_block(
            kind_of_block(block, tl.aic_cores), block, len(tasks), last - first, total, sched,
            [fmt.bubble_task_line(key[t], name[t], w) for w, t in top]))
    top10 = [fmt.bubble_task_line(key[t], name[t], w, fmt.TOP_WAIT_GAP)
             for w, t in sorted(every, key=lambda w: w[0], reverse=True)[:10]]
    return fmt.bubble_log(top10, blocks)


def test_bubble_log_is_upstreams_analysis_of_the_l1_file(run):
    _, hw, program, tl = run
    freq = hw.aicpu.profile_freq_mhz
    assert sw.bubble_log(program, tl, freq) == _bubble_log_as_upstream(program, tl, freq)


def _dyn_topo_all_lines(program):
    """dyn_topo.txt as it was built: every line in one list, joined."""
    from pipeline.emit.topo import call_ops
    from pipeline.formats import topo as fmt
    v = sw.TaskView.of(program)
    opmagic, _ = call_ops(v)
    src, dst = v.edge_src, v.edge_dst
    keep = v.seq[src] == v.seq[dst]
    src, dst = src[keep], dst[keep]
    same_call = v.call[src] == v.call[dst]
    order = np.lexsort((np.arange(src.size), ~same_call, src))
    succ_ids = v.task_id[dst[order]].tolist()
    ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=v.size))]).tolist()
    static = np.bincount(src[same_call], minlength=v.size).tolist()
    cols = [c.tolist() for c in (v.seq, v.task_id, v.root, opmagic, v.leaf, v.core_type, v.op)]
    lines = [fmt.HEADER]
    for t, (seq, tid, root, magic, leaf, core, op) in enumerate(zip(*cols)):
        fields = [seq, tid, root, v.root_hash[root], magic, leaf, v.leaf_hash[leaf], core, op,
                  fmt.NO_WRAP, static[t]]
        lines.append(fmt.row(fields, succ_ids[ptr[t]:ptr[t + 1]]))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("chunk", [7, None])
def test_dyn_topo_bytes_in_any_slices(run, tmp_path, monkeypatch, chunk):
    from pipeline.emit.topo import write_compile_files
    _, _, program, _ = run
    if chunk:
        monkeypatch.setattr(jt, "CHUNK", chunk)
    write_compile_files(program, tmp_path)
    assert (tmp_path / "dyn_topo.txt").read_bytes() == _dyn_topo_all_lines(program).encode()
