"""pipeline/formats: each rule that the writer and the reader of a file share, both ways."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from pipeline.formats import perf_trace, pmu, program, topo
from pipeline.formats.cores import (CoreType, is_sched_core_lane, lane_name, parse_lane_name,
                                    sched_core_lane, type_name, type_of_blocks)
from pipeline.formats.task_id import (FILE_MASK, formal_name, func_id, in_file, make_task_id,
                                      op_idx, task_key)


@given(st.integers(0, 1023), st.integers(0, 65535), st.integers(0, 32767))
def test_task_id_round_trips(func, op, seq):
    tid = make_task_id(func, op)
    assert (func_id(tid), op_idx(tid)) == (func, op) and in_file(tid) == tid <= FILE_MASK
    assert task_key(seq, tid) >> 32 == seq and formal_name(seq, tid) == f"{seq}-{func}-{op}"


def test_task_ids_encode_arrays_like_ints():
    func, op = np.array([0, 1, 15]), np.array([3, 0, 39])
    assert make_task_id(func, op).tolist() == [3, 65536, 15 * 65536 + 39]


def test_lane_names_round_trip_and_count_blocks_from_one():
    assert lane_name("AIC", 0) == "AIC_1" and parse_lane_name("AIC_1") == ("AIC", 1)
    assert parse_lane_name("Fake Core_0") is None and parse_lane_name("AICPU-SCHED-1") is None
    assert is_sched_core_lane(sched_core_lane(2, "AIV")) and not is_sched_core_lane("AICPU-SCHED")
    assert type_of_blocks(np.array([0, 23, 24, 71]), 24).tolist() == [1, 1, 0, 0]
    assert [type_name(c) for c in (0, 1, 3, 9)] == ["AIV", "AIC", "AICPU", "INVALID"]
    assert int(CoreType.AIC) == 1 and int(CoreType.AIV) == 0


def test_topo_rows_round_trip():
    fields = [1, 65538, 0, 123, 10002, 4, 456, 0, 2, -1, 1]
    line = topo.row(fields, [65539, 131072])
    assert topo.parse_line(line) == (fields, [65539, 131072])
    assert topo.parse_line(topo.HEADER) is None and topo.parse_line("") is None
    assert len(topo.HEADER.split(",")) == topo.FIXED + 1


PHASES = ["BEGIN", "DEV_TASK_RCV", "WAIT_CORE_EXIT", "DEV_TASK_SEND_FIRST_LEAF_TASK"]


@given(st.sampled_from(PHASES), st.integers(0, 199), st.none() | st.integers(0, 500))
def test_stamp_names_round_trip(phase, rnd, idx):
    assert perf_trace.parse_name(perf_trace.stamp_name(phase, rnd, idx)) == (phase, rnd, idx)


def test_perf_file_names_carry_their_first_round():
    assert perf_trace.file_round(perf_trace.perf_file(150)) == 150
    assert perf_trace.view_file(50) == "machine_runtime_operator_trace_50.json"


def test_hash_order_lines_and_op_attrs_agree():
    lines = [program.hash_order_line("l1ReuseInfo", "func0_2", 8),
             program.hash_order_line("vecMergeInfo", "func0_5", 2)]
    assert program.merge_attrs(lines) == {"l1_reuse_hashOrder": "func0_2",
                                          "l1_reuse_subgraphCount": 8,
                                          "vec_merge_hashOrder": "func0_5",
                                          "vec_merge_subgraphCount": 2}
    call = program.call_op(10002, 77, "MM1", lines)
    assert call["calleehash"] == "77" and call["op_attr"]["l1_reuse_subgraphCount"] == 8
    assert program.op_label(call) == "MM1"
    assert program.op_label({"semantic_label": ["", "x"]}) == "x"     # older dumps: a list


def test_program_readers_tell_calls_from_tile_ops():
    leaf = program.function(5, "leaf", program.GraphType.BLOCK_GRAPH, [{"opcode": "ADD"}])
    root = program.function(9, "root", program.GraphType.EXECUTE_GRAPH,
                            [program.call_op(10000, 5, "", [])])
    data = {"functions": [root, leaf]}
    assert [op["opcode"] for _, op in program.tile_ops(data)] == ["ADD"]
    assert program.leaf_functions(data) == [leaf] and root["hash"] == "9"


def test_record_views_of_writer_and_reader_agree():
    """A record filled through the numpy view reads back through the struct view."""
    assert pmu.PMU_RECORD.itemsize == pmu.LOG_RECORD.itemsize == pmu.RECORD_BYTES
    assert pmu.HEADER.size + pmu.HEAD.size == pmu.ENTRY_OFFSET
    assert pmu.PMU_ENTRY_DTYPE.itemsize == pmu.PMU_ENTRY[56].size
    assert pmu.LOG_ENTRY_DTYPE.itemsize == pmu.LOG_ENTRY.size
    rec = np.zeros(1, dtype=pmu.LOG_RECORD)
    rec["magic"], rec["type"], rec["thread"], rec["cnt"] = pmu.MAGIC, pmu.MSPROF_TYPE, 3, 2
    rec["head_magic"] = pmu.HEAD_MAGIC
    rec["head_bits"] = pmu.head_bits(np.array([70]), np.array([int(CoreType.AIV)]), pmu.LOG_TYPE)
    rec["entries"]["start"][0, 1], rec["entries"]["task"][0, 1] = 10**12, 65537
    raw = rec.tobytes()
    magic, _, kind, thread, _, _ = pmu.HEADER.unpack_from(raw, 0)
    head_magic, bits, _, _, cnt, *_ = pmu.HEAD.unpack_from(raw, pmu.HEADER.size)
    assert (magic, kind, thread, head_magic, cnt) == \
        (pmu.MAGIC, pmu.MSPROF_TYPE, 3, pmu.HEAD_MAGIC, 2)
    assert pmu.split_head_bits(bits) == (70, 0, pmu.LOG_TYPE)
    entry = pmu.LOG_ENTRY.unpack_from(raw, pmu.ENTRY_OFFSET + pmu.LOG_ENTRY.size)
    assert entry[2] == 65537 and entry[3] == 10**12


def test_records_of_starts_a_record_per_core_and_when_one_fills():
    core = np.array([0, 0, 0, 0, 1, 2, 2])
    assert pmu.records_of(core, 3).tolist() == [0, 0, 0, 1, 2, 3, 3]


def test_the_compilers_core_types_number_as_upstream_files_do():
    """The compiler's CoreType is the subset of upstream's numbering that leaf tasks use."""
    from pipeline.formats.cores import CoreType as FileCoreType
    from simcore.compiler import CoreType
    assert {c.name: int(c) for c in CoreType} == {n: int(FileCoreType[n]) for n in ("AIV", "AIC")}
