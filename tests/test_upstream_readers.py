"""Upstream PyPTO's own tools read every file we write.

Each fixture under fixtures/upstream/readers/ says, for one upstream tool (path and
commit in its ``_source``), which fields it reads and what it requires of them; it
was written by hand from the tool's source.  These tests build our files and check
them against those rules, so they need no upstream code.
"""
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest


from pipeline.emit.operator_trace import operator_trace
from pipeline.emit.swimlane import ready_counters
from pipeline.emit.tasks import TaskView
from pipeline.formats import swimlane as swimlane_format
from pipeline.runner import run_simulate

KERNELS = Path(__file__).resolve().parents[1] / "configs" / "kernels"
READERS = Path(__file__).parent / "fixtures" / "upstream" / "readers"
TYPES = {"int": int, "str": str, "list": list, "dict": dict}
DEBUG = {"debug_options.runtime_debug_mode": 1}
PROFILING = {"DUMP_DEVICE_PERF": "true", "PYPTO_PROF_PMU_EVENT_TYPE": "2"}


def reader(name: str) -> dict:
    return json.loads((READERS / f"{name}.json").read_text())


@pytest.fixture(scope="module")
def glm(tmp_path_factory):
    """glm_attention as the brief's run: swimlane, perf trace and PMU group 2 on."""
    out = tmp_path_factory.mktemp("glm")
    result = run_simulate(KERNELS / "glm_attention.yaml", DEBUG, "dav_2201", out, env=PROFILING)
    return out, result


def load(out: Path, name: str):
    return json.loads((out / name).read_text())


def check_fields(obj: dict, required: dict, optional: dict, where: str) -> None:
    for key, kind in required.items():
        assert key in obj, f"{where}: no '{key}'"
        assert isinstance(obj[key], TYPES[kind]), f"{where}: '{key}' is not {kind}"
    for key, kind in optional.items():
        if key in obj:
            assert isinstance(obj[key], TYPES[kind]), f"{where}: '{key}' is not {kind}"


def topo_rows(out: Path, rules: dict) -> list[dict]:
    names = rules["dyn_topo"]["fixed_fields"]
    rows = []
    for line in (out / "dyn_topo.txt").read_text().splitlines():
        if line and line[0].isalpha():
            continue
        cells = [int(c) for c in line.split(",") if c.strip()]
        rows.append({**dict(zip(names, cells)), "successors": cells[len(names):]})
    return rows


# -- tools/profiling/draw_swim_lane.py -----------------------------------------------------------
def test_fixtures_name_their_upstream_source():
    for path in READERS.glob("*.json"):
        source = json.loads(path.read_text())["_source"]
        assert source["repo"] == "hicann/pypto", path.name
        assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]), path.name
        assert source["paths"] and all(p.startswith(("tools/", "framework/"))
                                       for p in source["paths"]), path.name


def test_l1_prof_data_has_the_fields_the_merger_reads(glm):
    out, result = glm
    rules = reader("draw_swim_lane")["l1_prof_data"]
    cores = load(out, "tilefwk_L1_prof_data.json")
    assert isinstance(cores, list)
    for core in cores:
        check_fields(core, rules["core_required"], rules["core_optional"], "core")
        for task in core["tasks"]:
            check_fields(task, rules["task_required"], rules["task_optional"], "task")
    assert sum(len(c["tasks"]) for c in cores) == result.metrics["leaf_tasks"]


def test_program_json_calls_resolve_as_the_merger_needs(glm):
    out, _ = glm
    rules = reader("draw_swim_lane")["program_json"]
    program = load(out, "program.json")
    check_fields(program, rules["top_required"], {}, "program.json")
    hashes = set()
    for func in program["functions"]:
        check_fields(func, rules["function_required"], rules["function_optional"], "function")
        hashes.add(func["hash"])
    calls = [f for f in program["functions"] if f["graphtype"] == rules["call_graphtype"]]
    assert calls, "no function the merger resolves calls of"
    for func in calls:
        check_fields(func, rules["call_function_required"], {}, func["func_magicname"])
        tensors = {t["magic"]: t for t in func["tensors"]}
        raws = {r["rawmagic"] for r in func["rawtensors"]}
        for op in func["operations"]:
            check_fields(op, rules["call_op_required"], rules["call_op_optional"], "call op")
            assert op["calleehash"] in hashes, "a call to a function program.json lacks"
            for magic in op["ioperands"] + op["ooperands"]:
                check_fields(tensors[magic], rules["tensor_required_if_operand"], {}, "tensor")
                assert tensors[magic]["rawtensor"] in raws
    callees = {op["calleehash"] for f in calls for op in f["operations"]}
    assert callees == hashes - {f["hash"] for f in calls}, "every leaf function is called"


def test_dyn_topo_joins_program_json_and_the_l1_tasks(glm):
    out, _ = glm
    rules = reader("draw_swim_lane")
    functions = load(out, "program.json")["functions"]
    position = {f["hash"]: i for i, f in enumerate(functions)}
    rows = topo_rows(out, rules)
    keys = {r["seqNo"] << 32 | r["taskId"] for r in rows}
    for r in rows:
        assert str(r["rootHash"]) in position and str(r["leafHash"]) in position
        root = functions[position[str(r["rootHash"])]]
        assert r["opmagic"] in {op["opmagic"] for op in root["operations"]}
        assert all(r["seqNo"] << 32 | s in keys for s in r["successors"])
    l1 = {t["seqNo"] << 32 | t["taskId"] for c in load(out, "tilefwk_L1_prof_data.json")
          for t in c["tasks"]}
    assert l1 == keys, "a task in one file only becomes a fake task"


def _upstream_events(out: Path, rules: dict) -> dict[int, tuple[str, int]]:
    """Name and tid of each task event the merger would draw, from the fixture's rules."""
    functions = load(out, "program.json")["functions"]
    index = {f["hash"]: i for i, f in enumerate(functions)}
    tids = {}
    for core in load(out, "tilefwk_L1_prof_data.json"):
        for t in core["tasks"]:
            tids[t["seqNo"] << 32 | t["taskId"]] = (core["blockIdx"] + 1) * 2 + 1000
    events = {}
    for r in topo_rows(out, rules):
        root = index.get(str(r["rootHash"]), len(functions))
        op = next((op for op in functions[root]["operations"] if op["opmagic"] == r["opmagic"]),
                  {}) if root < len(functions) else {}
        label = (op.get("semantic_label") or {}).get("label", "")
        tid = r["taskId"]
        name = (f"{r['seqNo']}-{(tid >> 16) & 0x3FF}-{tid & 0xFFFF}-{root}-{r['psgId']}"
                f"({label})")
        events[r["seqNo"] << 32 | tid] = (name, tids[r["seqNo"] << 32 | tid])
    return events


def test_the_merger_would_draw_our_tasks_as_our_swimlane_does(glm):
    out, result = glm
    rules = reader("draw_swim_lane")
    expected = _upstream_events(out, rules)
    ours = [e for e in load(out, "merged_swimlane.json")["traceEvents"]
            if e["ph"] == "X" and e["pid"] == 1]
    assert len(ours) == len(expected) == result.metrics["leaf_tasks"]
    drawn = {e["args"]["seqNo"] << 32 | e["args"]["taskId"]: (e["name"], e["tid"]) for e in ours}
    assert drawn == expected
    labels = {name[name.index("(") + 1:-1] for name, _ in expected.values()}
    assert "" not in labels and {"MM1", "MM2", "softmax"} <= labels


def test_execution_hints_are_the_mergers(glm):
    out, _ = glm
    rules = reader("draw_swim_lane")
    leaf_of = {r["seqNo"] << 32 | r["taskId"]: r["leafHash"] for r in topo_rows(out, rules)}
    runs: dict[int, list] = {}
    for core in load(out, "tilefwk_L1_prof_data.json"):
        for t in core["tasks"]:
            dur = t["execEnd"] / 50 - t["execStart"] / 50
            name = f"{t['seqNo']}-{(t['taskId'] >> 16) & 0x3FF}-{t['taskId'] & 0xFFFF}"
            r = runs.setdefault(leaf_of[t["seqNo"] << 32 | t["taskId"]], [0, 0, None, "", None, ""])
            r[0], r[1] = r[0] + 1, r[1] + dur
            if r[2] is None or dur > r[2]:
                r[2], r[3] = dur, name
            if r[4] is None or dur < r[4]:
                r[4], r[5] = dur, name
    hints = {leaf: f"Average Execution Time: {total / n}\nMax Execution Time: {hi}, Task: [{at_hi}]"
                   f"\nMin Execution Time: {lo}, Task: [{at_lo}]\n"
             for leaf, (n, total, hi, at_hi, lo, at_lo) in runs.items()}
    for e in load(out, "merged_swimlane.json")["traceEvents"]:
        if e["ph"] == "X" and e["pid"] == 1:
            leaf = leaf_of[e["args"]["seqNo"] << 32 | e["args"]["taskId"]]
            assert e["args"]["execution-hint"] == hints[leaf]


def test_every_call_op_carries_the_hash_order_of_its_callee(glm):
    out, _ = glm
    rules = reader("draw_swim_lane")["program_json"]
    functions = load(out, "program.json")["functions"]
    by_hash = {f["hash"]: f for f in functions}
    merged = 0
    for func in functions:
        if func["graphtype"] != rules["call_graphtype"]:
            continue
        for op in func["operations"]:
            callee_attrs = by_hash[op["calleehash"]]["operations"][0].get("op_attr", {})
            order = {k: v for k, v in callee_attrs.items() if k in rules["hash_order_attrs"]}
            assert {k: v for k, v in op.get("op_attr", {}).items()
                    if k in rules["hash_order_attrs"]} == order
            merged += bool(order)
    assert merged, "glm merges leaf functions (L1Reuse), so some call carries a hashOrder"


def test_ready_counters_follow_the_mergers_rule():
    case = reader("draw_swim_lane")["ready_count_case"]
    tasks = case["tasks_in_l1_order"]
    index = {(t["seqNo"], t["taskId"]): i for i, t in enumerate(tasks)}
    edges = [(i, index[(t["seqNo"], s)]) for i, t in enumerate(tasks) for s in t["successors"]]
    src, dst = np.array([a for a, _ in edges]), np.array([b for _, b in edges])
    zeros = np.zeros(len(tasks), int)

    def column(key):
        return np.array([t[key] for t in tasks])
    view = TaskView(seq=column("seqNo"), task_id=column("taskId"), call=column("seqNo"),
                    root=zeros, op=column("taskId"), leaf=zeros,
                    core_type=np.array([1 if t["coreType"] == "AIC" else 0 for t in tasks]),
                    edge_src=src, edge_dst=dst, root_hash=[0], leaf_hash=[0], labels=[""])
    events = ready_counters(view, np.arange(len(tasks)), column("execStart"), column("execEnd"),
                            1.0)
    assert [(e["name"], e["ts"], e["args"]["size"]) for e in events] == \
        [tuple(x) for x in case["expected"]]


def test_our_swimlane_counts_what_the_merger_would(glm):
    """The merger changes a ReadyCount only where a task starts or ends; counts never go
    negative and nothing is left ready at the end."""
    out, _ = glm
    events = load(out, "merged_swimlane.json")["traceEvents"]
    tasks = [e for e in events if e["ph"] == "X" and e["pid"] == 1]
    stamps = np.unique([e["ts"] for e in tasks] + [e["ts"] + e["dur"] for e in tasks])
    ready = [e for e in events if e["ph"] == "C" and e["name"].startswith("ReadyCount")]
    assert ready and all(e["args"]["size"] >= 0 for e in ready)
    at = np.array([e["ts"] for e in ready])
    nearest = np.clip(np.searchsorted(stamps, at), 1, stamps.size - 1)
    gap = np.minimum(abs(stamps[nearest] - at), abs(stamps[nearest - 1] - at))
    assert gap.max() < 1e-3
    last = {e["name"]: e["args"]["size"] for e in ready}
    assert set(last) == {"ReadyCount_AIC", "ReadyCount_AIV", "ReadyCount_Total"}
    assert set(last.values()) == {0}
    assert any(e["ph"] == "C" and e["name"] == "Dependence Solving (MHz)" for e in events)


# -- tools/profiling/tilefwk_prof_data_parser.py -------------------------------------------------
def _bits(value: int, field: list[int]) -> int:
    """The bit field [first bit, width] of an integer."""
    return (value >> field[0]) & ((1 << field[1]) - 1)


def _log_entries(data_dir: Path, rules: dict) -> dict[int, list[dict]]:
    """LOG entries per core id, read with the parser's record format."""
    fmt = struct.Struct(rules["record_struct"])
    assert fmt.size == rules["record_bytes"]
    per_core: dict[int, list[dict]] = {}
    for path in data_dir.iterdir():
        if "aicpu.data" not in path.name:
            continue
        raw = path.read_bytes()
        for off in range(0, len(raw) // fmt.size * fmt.size, fmt.size):
            fields = fmt.unpack_from(raw, off)
            bits = fields[rules["head_bits_index"]]
            data_type = _bits(bits, rules["data_type_bits"])
            if fields[rules["msprof_type_index"]] != rules["msprof_type"] or \
                    data_type != rules["log_data_type"]:
                continue
            core = _bits(bits, rules["core_id_bits"])
            core_type = _bits(bits, rules["core_type_bits"])
            n = min(rules["max_entries"], fields[rules["count_index"]])
            for i in range(n):
                first = rules["first_entry_index"] + i * len(rules["entry_fields"])
                entry = dict(zip(rules["entry_fields"], fields[first:first + 5]))
                per_core.setdefault(core, []).append(
                    {**entry, "coreType": rules["core_types"][core_type]})
    return per_core


def test_operand_hints_are_what_the_merger_reads_from_program_json(glm):
    """Each task's ioperand-hint / ooperand-hint is what upstream's merger builds from
    program.json (draw_swim_lane.py load_dyn_topo: the CALL op of the task's root function
    with the task's opmagic, its operand magics resolved through the root function's
    tensors and rawtensors), and the hints name real boxes: bf16 query and key blocks in."""
    out, _ = glm
    functions = load(out, "program.json")["functions"]
    events = [e for e in load(out, "merged_swimlane.json")["traceEvents"]
              if e.get("ph") == "X" and e.get("pid") == 1]
    assert events
    for e in events:
        root = functions[int(e["name"].split("(")[0].split("-")[3])]
        magic = int(e["args"]["event-hint"].split("callOpMagic:")[1].split(",")[0])
        (call,) = [op for op in root["operations"] if op["opmagic"] == magic]
        tensors = {t["magic"]: t for t in root["tensors"]}
        raws = {r["rawmagic"]: r for r in root["rawtensors"]}
        for key, hint in (("ioperands", "ioperand-hint"), ("ooperands", "ooperand-hint")):
            want = []
            for m in dict.fromkeys(call[key]):
                t = tensors[m]
                want.append({m: {"shape": t["shape"], "dtype": raws[t["rawtensor"]]["datatype"],
                                 "rawmagic": t["rawtensor"]}})
            assert e["args"][hint] == str(want)
    mm1 = next(e for e in events if e["name"].endswith("(MM1)"))
    assert "'dtype': 8" in mm1["args"]["ioperand-hint"]          # DT_BF16
    assert mm1["args"]["ooperand-hint"] != "[]"


@pytest.fixture(scope="module")
def two_launches(tmp_path_factory):
    """multi_stitch_add launched twice with every profiling switch on."""
    out = tmp_path_factory.mktemp("twice")
    result = run_simulate(KERNELS / "multi_stitch_add.yaml", DEBUG, "dav_2201", out, rounds=2,
                          env=PROFILING)
    return out, result


@pytest.mark.parametrize("run", ["glm", "two_launches"])
def test_log_records_give_the_l1_tasks(run, request):
    """Task for task, the LOG records hold what the L1 file holds (after two launches:
    both the last one's)."""
    out, result = request.getfixturevalue(run)
    rules = reader("tilefwk_prof_data_parser")
    per_core = _log_entries(out / "PROF_000001" / "device_0" / "data", rules)
    assert per_core and max(len(t) for t in per_core.values()) > 0
    assert sum(len(t) for t in per_core.values()) == result.metrics["leaf_tasks"]
    for core in load(out, "tilefwk_L1_prof_data.json"):
        logged = per_core[core["blockIdx"]]
        assert {t["coreType"] for t in logged} == {core["coreType"]}
        assert [(t["seqNo"], t["subGraphId"], t["taskId"], t["execStart"], t["execEnd"])
                for t in logged] == \
            [(t["seqNo"], t["subGraphId"], t["taskId"], t["execStart"], t["execEnd"])
             for t in core["tasks"]]


def test_no_log_records_without_profiling(tmp_path):
    run_simulate(KERNELS / "multi_stitch_add.yaml", DEBUG, "dav_2201", tmp_path, env={})
    assert not (tmp_path / "PROF_000001").exists()


# -- tools/scripts/machine_perf_trace.py gen_perfetto ---------------------------------------------
def test_aicpu_view_is_what_gen_perfetto_makes():
    case = reader("machine_perf_trace_gen_perfetto")
    events = operator_trace(case["input"])["traceEvents"]
    assert len(events) == len(case["expected"])
    for ours, theirs in zip(events, case["expected"]):
        assert ours.keys() == theirs.keys()
        for key, value in theirs.items():
            assert ours[key] == (pytest.approx(value) if isinstance(value, float) else value)


def test_every_lane_opens_with_begin(glm):
    """gen_perfetto gives a lane's first phase no start unless it is a BEGIN stamp."""
    out, _ = glm
    for lane in load(out, "machine_trace_perf_data_0.json"):
        first = min(lane["tasks"], key=lambda t: t["end"])
        assert first["name"].startswith("BEGIN"), lane["coreType"]


# -- tools/scripts/tuner/tuner.py ----------------------------------------------------------------
def test_tuner_reads_every_core_of_the_bubble_log(glm):
    out, result = glm
    pattern = re.compile(reader("tuner")["core_pattern"])
    assert pattern.pattern == swimlane_format.CORE_BLOCK.pattern
    found = pattern.findall((out / "bubble_analysis.log").read_text())
    tasks = {(c["coreType"], c["blockIdx"]): len(c["tasks"])
             for c in load(out, "tilefwk_L1_prof_data.json")}
    assert len(found) == len(tasks)
    assert {(m[0], int(m[1])) for m in found} == \
        {(f"{kind}_{block + 1}", n) for (kind, block), n in tasks.items()}
    assert max(float(m[2]) for m in found) == pytest.approx(result.metrics["kernel_us"], abs=0.05)
