"""msprof PMU records (``PROF_*/device_*/data/*aicpu.data*``) -> tables and CSV.

What upstream's ``tools/profiling/tilefwk_pmu_to_csv.py`` does (record layout:
pipeline/formats/pmu.py): every file whose name contains ``aicpu.data`` is a run
of fixed 256-byte records; a record whose headers carry PyPTO's magics and data
type 3 (PMU) holds up to three (or four, in the 48-byte form) entries
``{seqNo, taskId, totalCyc, pmuCnt0..9}``; other records (LOG, other msprof
reports) are skipped.  The counters mean
nothing without the event group and chip, which the user names (``-pe``,
``--arch``): the CSV's columns are the group's names for that chip, applied
positionally, cut to the counters present.

Reads files only, so it works the same on ptolab's output and on a device's.
"""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import polars as pl

from simcore.spec.errors import ConfigError

from ..formats import pmu as rec
from ..formats.cores import type_name

GROUPS = (1, 2, 4, 5, 6, 7, 8)
ARCHES = ("dav_2201", "dav_3510")
FIXED = ["thread id", "task id", "stream id", "core id", "seqNo", "sub task id", "total cycle"]
CSV_NAME = "tilefwk_prof_pmu.csv"

COLUMNS: dict[str, dict[int, list[str]]] = {
    "dav_2201": {
        1: ["cube_fp16_exec", "cube_int8_exec", "vec_fp32_exec", "vec_fp16_128lane_exec",
            "vec_fp16_64lane_exec", "vec_int32_exec", "vec_misc_exec"],
        2: ["vec_busy_cycles", "cube_busy_cycles", "scalar_busy_cycles", "mte1_busy_cycles",
            "mte2_busy_cycles", "mte3_busy_cycles", "icache_miss", "icache_req"],
        4: ["ub_read_req", "ub_write_req", "l1_read_req", "l1_write_req", "l2_read_req",
            "l2_write_req", "main_read_req", "main_write_req"],
        # upstream names the second slot l0a_read_req too; kept as written
        5: ["l0a_read_req", "l0a_read_req", "l0b_read_req", "l0b_write_req", "l0c_read_req",
            "l0c_write_req"],
        6: ["bankgroup_stall_cycles", "bank_stall_cycles", "vec_resc_conflict_cycles"],
        7: ["ub_read_bw_mte", "l2_write_bw", "main_mem_write_bw", "ub_write_bw_mte",
            "ub_read_bw_vector", "ub_write_bw_vector", "ub_read_bw_scalar", "ub_write_bw_scalar"],
        8: ["write_cache_hit", "write_cache_miss_allocate", "r0_read_cache_hit",
            "r0_read_cache_miss_allocate", "r1_read_cache_hit", "r1_read_cache_miss_allocate"],
    },
    "dav_3510": {
        1: ["cube_fp_instr_busy", "cube_int_instr_busy"],
        2: ["pmu_idc_aic_vec_busy_o", "cube_instr_busy", "scalar_instr_busy", "mte1_instr_busy",
            "mte2_instr_busy", "mte3_instr_busy", "icache_req", "icache_miss",
            "pmu_fix_instr_busy"],
        4: ["bif_sc_pmu_read_main_instr_core", "bif_sc_pmu_write_main_instr_core",
            "pmu_aiv_ext_rd_ub_instr", "ub_pmu_vec_rd_ub_acc", "pmu_aiv_ext_wr_ub_instr",
            "ub_pmu_vec_wr_ub_acc", "pmu_rd_l1_instr", "pmu_wr_l1_instr"],
        5: ["cube_sc_pmu_read_l0a_instr", "pmu_wr_l0a_instr", "cube_sc_pmu_read_l0b_instr",
            "pmu_wr_l0b_instr", "fixp_rd_l0c_instr", "cube_sc_pmu_read_l0c_instr",
            "cube_sc_pmu_write_l0c_instr"],
        6: ["stu_pmu_wctl_ub_cflt", "ldu_pmu_ib_ub_cflt", "pmu_idc_aic_vec_instr_vf_busy_o",
            "idu_pmu_ins_iss_cnt"],
        7: ["pmu_rd_acc_ub_instr_p", "pmu_wr_acc_ub_instr_p", "pmu_fix_wr_ub_instr",
            "mte_sc_pmu_write_acc_ub_instr_0", "mte_sc_pmu_read_acc_ub_instr_0",
            "ub_pmu_vec_rd_ub_acc", "ub_pmu_vec_wr_ub_acc"],
        8: ["bif_sc_pmu_ar_close_l2_hit_core", "bif_sc_pmu_ar_close_l2_miss_core",
            "bif_sc_pmu_ar_close_l2_victim_core", "bif_sc_pmu_aw_close_l2_hit_core",
            "bif_sc_pmu_aw_close_l2_miss_core", "bif_sc_pmu_aw_close_l2_victim_core"],
    },
}

# group 2's columns as pipes, for the report's per-task pipe table
PIPE_COLUMNS = {
    "dav_2201": {"vec_busy_cycles": "vector", "cube_busy_cycles": "cube",
                 "scalar_busy_cycles": "scalar", "mte1_busy_cycles": "mte1",
                 "mte2_busy_cycles": "mte2", "mte3_busy_cycles": "mte3"},
    "dav_3510": {"pmu_idc_aic_vec_busy_o": "vector", "cube_instr_busy": "cube",
                 "scalar_instr_busy": "scalar", "mte1_instr_busy": "mte1",
                 "mte2_instr_busy": "mte2", "mte3_instr_busy": "mte3",
                 "pmu_fix_instr_busy": "fixp"},
}

RECORD_BYTES = rec.RECORD_BYTES


def data_files(data_dir: Path) -> list[Path]:
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise ConfigError("is not a directory. Pass the msprof data folder "
                          "PROF_<id>/device_<n>/data that holds the *aicpu.data* files.",
                          source=str(data_dir))
    files = sorted(p for p in data_dir.iterdir() if rec.DATA_MARK in p.name and p.is_file())
    if not files:
        raise ConfigError("holds no *aicpu.data* file. PMU records are written when "
                          "PYPTO_PROF_PMU_EVENT_TYPE is set (msprof --task-time=l3); pass "
                          "PROF_<id>/device_<n>/data of such a run.", source=str(data_dir))
    return files


def _entries(record: bytes) -> list[tuple]:
    """(threadId, head taskId, streamId, coreId, coreType, entry...) of one PMU record."""
    magic, _, kind, thread, data_len, _ = rec.HEADER.unpack_from(record, 0)
    if magic != rec.MAGIC or kind != rec.MSPROF_TYPE:
        return []
    head_magic, bits, task, stream, cnt, *_ = rec.HEAD.unpack_from(record, rec.HEADER.size)
    core, core_type, data_type = rec.split_head_bits(bits)
    if head_magic != rec.HEAD_MAGIC or data_type != rec.PMU_TYPE:
        return []
    size = 48 if cnt and data_len - rec.HEAD.size == cnt * 48 else 56
    room = (RECORD_BYTES - rec.ENTRY_OFFSET) // size
    return [(thread, task, stream, core, core_type)
            + rec.PMU_ENTRY[size].unpack_from(record, rec.ENTRY_OFFSET + i * size)
            for i in range(min(cnt, 4, room))]


def read_pmu(data_dir: Path) -> list[tuple]:
    """Every PMU entry of a data folder, in file and record order."""
    rows = []
    for path in data_files(data_dir):
        raw = path.read_bytes()
        if len(raw) % RECORD_BYTES:
            raise ConfigError(
                f"is {len(raw)} bytes, not a whole number of {RECORD_BYTES}-byte records: the "
                f"file is truncated (was msprof still writing?) or not an msprof aicpu.data "
                f"file.", source=str(path))
        for off in range(0, len(raw), RECORD_BYTES):
            rows += _entries(raw[off:off + RECORD_BYTES])
    if not rows:
        raise ConfigError("holds *aicpu.data* files but no PyPTO PMU record (magic 0x5A5A / "
                          "0x6BD3, data type 3). Was the run collected with msprof "
                          "--task-time=l3?", source=str(data_dir))
    return rows


def column_names(group: int, arch: str, present: int) -> list[str]:
    names = COLUMNS.get(arch, {}).get(group) or [f"pmu_cnt{i}" for i in range(present)]
    return names[:present]


def csv_rows(rows: list[tuple], group: int, arch: str) -> tuple[list[str], list[list[int]]]:
    """Header and rows of ``tilefwk_prof_pmu.csv``."""
    present = min(len(r) - 8 for r in rows)
    header = FIXED + column_names(group, arch, present)
    body = [[thread, task, stream, core, seq, sub, total, *counters][:len(header)]
            for thread, task, stream, core, _, seq, sub, total, *counters in rows]
    return header, body


def csv_text(rows: list[tuple], group: int, arch: str) -> str:
    header, body = csv_rows(rows, group, arch)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(body)
    return buf.getvalue()


def pmu_table(rows: list[tuple], group: int, arch: str) -> pl.DataFrame:
    """One row per task: core, core type, total cycles, named counters, pipe busy cycles."""
    header, body = csv_rows(rows, group, arch)
    names = header[len(FIXED):]
    unique = [n if names.index(n) == i else f"{n}_{i}" for i, n in enumerate(names)]
    data = {"thread": [r[0] for r in body], "core": [r[3] for r in body],
            "core_type": [type_name(r[4]) for r in rows],
            "seq_no": [r[4] for r in body], "task_id": [r[5] for r in body],
            "total_cycles": [r[6] for r in body]}
    for i, name in enumerate(unique):
        data[name] = [r[len(FIXED) + i] for r in body]
    # only pipes group 2 counted: a missing column means "not measured", never zero
    pipes = PIPE_COLUMNS.get(arch, {}) if group == 2 else {}
    for name, pipe in pipes.items():
        if name in data:
            data[f"pipe_{pipe}"] = data[name]
    return pl.DataFrame(data, schema_overrides={k: pl.Int64 for k in data if k != "core_type"})


def read_pipe_timeline(path: Path) -> pl.DataFrame:
    """A PMU Trace (``msprof_*.json``) as one row per stretch of pipe work.

    Columns core (the number in the process name, e.g. 3 for ``AIV_3``), core_type,
    pipe (the thread name: MTE2, MTE1, Cube, Vector, FIXP, MTE3, Scalar), start_us,
    dur_us and name (the leaf function).  mark_stamp instants are left out.
    """
    try:
        trace = json.loads(Path(path).read_text(encoding="utf-8"))
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        procs = {e["pid"]: str(e["args"]["name"]) for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
        threads = {(e["pid"], e["tid"]): str(e["args"]["name"]) for e in events
                   if e.get("ph") == "M" and e.get("name") == "thread_name"}
        rows = [(procs[e["pid"]], threads[(e["pid"], e["tid"])], float(e["ts"]), float(e["dur"]),
                 str(e.get("name", ""))) for e in events if e.get("ph") == "X"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as exc:
        raise ConfigError(f"is not a readable PMU Trace (Chrome trace with process_name and "
                          f"thread_name metadata per core and pipe): {exc!r}. A truncated "
                          f"file usually means the run had not finished writing it.",
                          source=str(path)) from None
    kind = [re.match(r"^(\D*?)_?(\d+)$", r[0]) for r in rows]
    return pl.DataFrame({
        "core": [int(m.group(2)) if m else -1 for m in kind],
        "core_type": [m.group(1) if m else r[0] for m, r in zip(kind, rows)],
        "pipe": [r[1] for r in rows], "start_us": [r[2] for r in rows],
        "dur_us": [r[3] for r in rows], "name": [r[4] for r in rows]},
        schema={"core": pl.Int64, "core_type": pl.Utf8, "pipe": pl.Utf8,
                "start_us": pl.Float64, "dur_us": pl.Float64, "name": pl.Utf8})
