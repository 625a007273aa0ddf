"""``DUMP_DEVICE_PERF=true`` files (hicann/pypto
framework/src/machine/runtime/runner/dump_device_perf.cpp ``DumpAicpuPerfInfo``;
read by tools/scripts/machine_perf_trace.py ``analyze`` and ``gen_perfetto``).

``machine_trace_perf_data_<N>.json``: an array of lanes ``{blockIdx, coreType,
freq, tasks: [{name, end}]}``; each stamp marks the end of a phase.  Lanes are
the AICPU control thread (``AICPU-CTRL``, block 0), the schedule threads
(``AICPU-SCHED``, blocks 1..) and one per AICore (``SCHED<k>-AIC|AIV``,
1-based blocks).  Stamp names are ``PHASE_<round>`` or ``PHASE_<round>(<k>)``.
A file covers up to 50 rounds and is named by its first round; at most 200
rounds are recorded.

``machine_runtime_operator_trace_<N>.json`` is what ``gen_perfetto`` makes of
it: the "AICPU View" process (pid 0), a thread per lane named
``<coreType>-<blockIdx>``.
"""
from __future__ import annotations

import re
from pathlib import Path

PERF_PREFIX = "machine_trace_perf_data_"
VIEW_PREFIX = "machine_runtime_operator_trace_"
PERF_GLOB = f"{PERF_PREFIX}*.json"
MAX_ROUNDS = 200
ROUNDS_PER_FILE = 50

CTRL, SCHED = "AICPU-CTRL", "AICPU-SCHED"
AICPU_VIEW, AICPU_VIEW_PID = "AICPU View", 0
LANE_KEYS = ("blockIdx", "coreType", "freq", "tasks")

# upstream analyze's name grammar: BASE[_round][(idx)]; the lazy base leaves the round to
# the suffix
_NAME = re.compile(r"^([A-Z0-9_]+?)(?:_(\d+))?(?:\((\d+)\))?$")


def perf_file(first_round: int) -> str:
    return f"{PERF_PREFIX}{first_round}.json"


def view_file(first_round: int) -> str:
    return f"{VIEW_PREFIX}{first_round}.json"


def file_round(path: Path) -> int:
    """The first round a perf file covers (the N of its name)."""
    return int(Path(path).stem.rsplit("_", 1)[-1])


def stamp_name(phase: str, round_no: int, idx: int | None = None) -> str:
    return f"{phase}_{round_no}" + ("" if idx is None else f"({idx})")


def parse_name(name: str) -> tuple[str, int | None, int | None] | None:
    """(phase, round or None, index or None) of a stamp name; None if it does not parse."""
    m = _NAME.match(name)
    if not m:
        return None
    rnd, idx = m.group(2), m.group(3)
    return m.group(1), None if rnd is None else int(rnd), None if idx is None else int(idx)


def lane(block: int, core_type: str, freq: float, tasks: list[dict]) -> dict:
    # upstream writes the counter rate as an integer (50, 1000)
    rate = int(freq) if float(freq).is_integer() else float(freq)
    return {"blockIdx": block, "coreType": core_type, "freq": rate, "tasks": tasks}


def view_thread_name(lane_: dict) -> str:
    return f"{lane_['coreType']}-{lane_['blockIdx']}"
