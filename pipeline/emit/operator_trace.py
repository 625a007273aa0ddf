"""``machine_runtime_operator_trace_<N>.json``: the AICPU View of a perf file.

What upstream's ``machine_perf_trace.py gen_perfetto`` makes of a
``machine_trace_perf_data_<N>.json`` lane array (hicann/pypto
tools/scripts/machine_perf_trace.py ``convert_to_perfetto_format``): a Chrome
trace with one process, "AICPU View" (pid 0), and one thread per input lane
(tid = lane position, named ``<coreType>-<blockIdx>``).  Stamps are phase ends,
so each phase becomes an ``X`` event from the previous stamp to its own;
a ``BEGIN`` stamp has no predecessor and is drawn one cycle wide.

Times are absolute microseconds (cycles / freq), the same base as
``merged_swimlane.json``, which is why the events can be prepended there and
line up with the AICore tasks.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..formats import perf_trace as fmt
from . import jsontext as jt
from .atomic import open_text, write_json


def _lane_events(lane: dict, tid: int) -> list[dict]:
    """The phases of one lane, as gen_perfetto draws them.

    A stamp whose end equals the previous (already moved) end moves one cycle on;
    a phase starts where the previous stamp ended (BEGIN: one cycle before its own
    end), and a phase that would not be positive is drawn one cycle wide.
    """
    freq = lane["freq"]
    moved: list[tuple[str, int]] = []
    for task in sorted(lane["tasks"], key=lambda t: t["end"]):
        end = int(task["end"])
        if moved and end == moved[-1][1]:
            end += 1
        moved.append((task["name"], end))
    prev: int | None = None
    events = []
    for name, end in moved:
        # a lane that does not open with BEGIN has no start either (upstream then fails on
        # the whole file); draw it like BEGIN
        start = end - 1 if name.startswith("BEGIN") or prev is None else prev
        dur = (end - start) / freq
        events.append({"name": name, "cat": lane["coreType"], "ph": "X",
                       "ts": start / freq, "dur": dur if dur > 0 else 1 / freq,
                       "pid": fmt.AICPU_VIEW_PID, "tid": tid, "freq": freq})
        prev = end
    return events


def operator_trace(lanes: list[dict]) -> dict:
    """The AICPU View trace of one perf file's lanes: per lane its name, then its phases."""
    events: list[dict] = [{"args": {"name": fmt.AICPU_VIEW, "type": "aicpu"},
                           "cat": "__metadata", "name": "process_name", "ph": "M",
                           "pid": fmt.AICPU_VIEW_PID}]
    for tid, lane in enumerate(lanes):
        events.append({"name": "thread_name", "ph": "M", "pid": fmt.AICPU_VIEW_PID, "tid": tid,
                       "args": {"name": fmt.view_thread_name(lane)}})
        events += _lane_events(lane, tid)
    return {"traceEvents": events}


# an X event of the view file, as json.dumps(trace, indent=2) lays it out
_VIEW_X = ('    {\n      "name": %s,\n      "cat": %s,\n      "ph": "X",\n      "ts": %s,\n'
           '      "dur": %s,\n      "pid": %s,\n      "tid": %s,\n      "freq": %s\n    }')
_VIEW_X_KEYS = ("name", "cat", "ph", "ts", "dur", "pid", "tid", "freq")


def _view_event_text(event: dict) -> str:
    if event.get("ph") == "X" and tuple(event) == _VIEW_X_KEYS:
        e = event
        return _VIEW_X % (jt.string(e["name"]), jt.string(e["cat"]), jt.number(e["ts"]),
                          jt.number(e["dur"]), jt.number(e["pid"]), jt.number(e["tid"]),
                          jt.number(e["freq"]))
    return jt.indented(event, 2, 2)


def write_operator_trace(path: Path, trace: dict) -> None:
    """``operator_trace``'s result written as ``write_json(..., indent=2)`` would, its
    phase events through a template instead of the pure-Python indenting encoder."""
    events = trace["traceEvents"]
    with open_text(path) as out:
        if not events:
            out.write('{\n  "traceEvents": []\n}\n')
            return
        out.write('{\n  "traceEvents": [\n')
        for lo, hi in jt.chunks(len(events)):
            out.write((",\n" if lo else "") + ",\n".join(map(_view_event_text, events[lo:hi])))
        out.write("\n  ]\n}\n")


def prepend_to_swimlane(path: Path, aicpu_events: list[dict]) -> None:
    """Put the AICPU View in front of ``merged_swimlane.json``'s events, as upstream does.

    The runner no longer calls this (swimlane.write_swimlane_files takes the views and
    writes the file once); it stays as the reference the writers are checked against."""
    trace = json.loads(Path(path).read_text(encoding="utf-8"))
    kernel = trace["traceEvents"] if isinstance(trace, dict) else trace
    write_json(Path(path), {"traceEvents": list(aicpu_events) + kernel}, indent=None)
