"""``machine_runtime_operator_trace_<N>.json``: the AICPU View of a perf file.

What upstream's ``machine_perf_trace.py gen_perfetto`` makes of a
``machine_trace_perf_data_<N>.json`` lane array (reference/upstream-formats.md §7):
a Chrome trace with one process, "AICPU View" (pid 0), and one thread per input
lane (tid = lane position, named ``<coreType>-<blockIdx>``).  Stamps are phase
ends, so each phase becomes an ``X`` event from the previous stamp to its own;
a ``BEGIN`` stamp has no predecessor and is drawn one cycle wide.  Equal ends are
pushed one cycle apart so that no phase has zero width.

Times are absolute microseconds (cycles / freq), the same base as
``merged_swimlane.json``, which is why the events can be prepended there and
line up with the AICore tasks.
"""
from __future__ import annotations

import json
from pathlib import Path

from .atomic import write_json


def _lane_events(lane: dict, tid: int) -> list[dict]:
    freq = lane["freq"]
    prev: int | None = None
    events = []
    for task in sorted(lane["tasks"], key=lambda t: t["end"]):
        end = int(task["end"])
        if prev is not None and end <= prev:
            end = prev + 1
        # a lane that does not open with BEGIN has no start either; draw it like BEGIN
        start = end - 1 if task["name"].startswith("BEGIN") or prev is None else prev
        dur = (end - start) / freq
        events.append({"name": task["name"], "cat": lane["coreType"], "ph": "X",
                       "ts": start / freq, "dur": dur if dur > 0 else 1 / freq,
                       "pid": 0, "tid": tid, "freq": freq})
        prev = end
    return events


def operator_trace(lanes: list[dict]) -> dict:
    """The AICPU View trace of one perf file's lanes: metadata first, then phases."""
    events: list[dict] = [{"args": {"name": "AICPU View", "type": "aicpu"}, "cat": "__metadata",
                           "name": "process_name", "ph": "M", "pid": 0}]
    events += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": tid,
                "args": {"name": f"{lane['coreType']}-{lane['blockIdx']}"}}
               for tid, lane in enumerate(lanes)]
    for tid, lane in enumerate(lanes):
        events += _lane_events(lane, tid)
    return {"traceEvents": events}


def prepend_to_swimlane(path: Path, aicpu_events: list[dict]) -> None:
    """Put the AICPU View in front of ``merged_swimlane.json``'s events, as upstream does."""
    trace = json.loads(Path(path).read_text(encoding="utf-8"))
    kernel = trace["traceEvents"] if isinstance(trace, dict) else trace
    write_json(Path(path), {"traceEvents": list(aicpu_events) + kernel}, indent=None)
