"""The per-round summary table of upstream ``machine_perf_trace.py analyze``.

Input is the lane array of a ``machine_trace_perf_data_<N>.json`` file
(pipeline/formats/perf_trace.py); every stamp marks the *end* of a phase, so
a phase lasts from the previous stamp on the same lane to its own.  For each
round the table has one row for the AICPU control thread, one per schedule
thread and one aggregated over all AICore lanes, in nine columns (hicann/pypto
tools/scripts/machine_perf_trace.py ``ANALYZE_TABLE_HEADERS``).  A
value the lanes cannot give is shown as ``-``, every other value as ``%.2f``
microseconds (cycles / the lane's ``freq``).

The same function reads files simulated by ptolab and files captured by PyPTO
on a device; it only ever sees the JSON.
"""
from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from simcore.spec.errors import ConfigError

from ..formats import perf_trace as fmt
from ..formats.cores import is_sched_core_lane
from ..formats.perf_trace import parse_name

HEADER = ["Compute Units", "DEV_TASK_BUILD(us)", "ALLOC_THREAD_ID(us)", "INIT(us)",
          "CORE_HAND_SHAKE(us)", "DEV_TASK_RCV(us)", "Post-process(us)",
          "End-to-End time(us)", "Total run time(us)"]
NA = "-"

# the schedule thread's "post-process": everything after the first dev task ran
_SCHED_POST = (("DEV_TASK_SYNC_CORE_STOP", 0), ("DEV_TASK_RSP", 0),
               ("WAIT_ALL_DEV_TASK_FINISH", None), ("WAIT_CORE_EXIT", None), ("EXIT", None))


@dataclass
class Round:
    """One round's table: ``name`` is ``round<r+1>``, rows hold the nine cells as text."""
    name: str
    rows: list[list[str]]
    header: list[str] = field(default_factory=lambda: list(HEADER))


@dataclass
class _LaneRound:
    """What analyze keeps of one lane's stamps in one round."""
    freq: float
    first_dur: dict = field(default_factory=dict)      # base -> first duration
    first_dur_idx: dict = field(default_factory=dict)  # (base, idx) -> first duration
    dur_sum: dict = field(default_factory=dict)        # base -> sum of durations
    first_end: dict = field(default_factory=dict)      # base -> first end
    ends: dict = field(default_factory=dict)           # base -> every end
    min_end: int | None = None
    max_end: int | None = None
    total: int = 0

    def us(self, cycles: float | None) -> str:
        return NA if cycles is None else f"{max(cycles, 0) / self.freq:.2f}"


def _stamps(lane: dict) -> list[tuple[int, str, int | None, int | None]]:
    """(end, base, round, idx) of every parsable stamp, sorted by end (stable)."""
    out = []
    for task in lane.get("tasks", []):
        parsed = parse_name(str(task["name"]))
        if parsed is not None:
            out.append((int(task["end"]), *parsed))
    out.sort(key=lambda s: s[0])
    return out


def _lane_round(stamps: list, rnd: int | None, freq: float) -> _LaneRound | None:
    kept = [s for s in stamps if s[2] == rnd]
    if not kept:
        return None
    lr = _LaneRound(freq=freq, min_end=kept[0][0], max_end=max(s[0] for s in kept))
    prev = None
    for end, base, _, idx in kept:
        dur = None if prev is None else end - prev
        prev = end
        lr.first_end.setdefault(base, end)
        lr.ends.setdefault(base, []).append(end)
        if dur is None:
            continue
        lr.first_dur.setdefault(base, dur)
        lr.first_dur_idx.setdefault((base, idx), dur)
        lr.dur_sum[base] = lr.dur_sum.get(base, 0) + dur
        lr.total += max(dur, 0)
    return lr


def _ctrl_row(name: str, lr: _LaneRound) -> list[str]:
    return [name, lr.us(lr.dur_sum.get("DEV_TASK_BUILD")), NA, NA, NA, NA,
            lr.us(lr.first_dur.get("EXIT")), NA, lr.us(lr.total)]


def _sched_row(name: str, lr: _LaneRound) -> list[str]:
    post = [lr.first_dur.get(base) if idx is None else lr.first_dur_idx.get((base, idx))
            for base, idx in _SCHED_POST]
    post = [max(d, 0) for d in post if d is not None]
    begin = lr.first_end.get("BEGIN")
    ends = [lr.first_end[b] for b in ("WAIT_CORE_EXIT", "EXIT")
            if b in lr.first_end and begin is not None and lr.first_end[b] >= begin]
    total = max(ends) - begin if ends else lr.total
    return [name, NA, lr.us(lr.first_dur.get("ALLOC_THREAD_ID")), lr.us(lr.first_dur.get("INIT")),
            lr.us(lr.first_dur.get("CORE_HAND_SHAKE")),
            lr.us(lr.first_dur_idx.get(("DEV_TASK_RCV", 0))),
            lr.us(sum(post)) if post else NA, NA, lr.us(total)]


def _aicore_row(lanes: list[_LaneRound]) -> list[str]:
    exec_rows = [lr for lr in lanes if "DEV_TASK_ALL_LEAF_TASK_EXEC" in lr.ends]
    if not exec_rows:
        return ["AICore"] + [NA] * 8
    fmt = exec_rows[0]
    first_rcv = [e for lr in exec_rows
                 for e in lr.ends.get("DEV_TASK_WAIT_RCV_FIRST_LEAF_TASK", [])]
    last_exec = max(e for lr in exec_rows for e in lr.ends["DEV_TASK_ALL_LEAF_TASK_EXEC"])
    start = min(lr.min_end for lr in exec_rows)
    stop = max(lr.max_end for lr in lanes)
    rcv = min(first_rcv) if first_rcv else None
    return ["AICore", NA, NA, fmt.us(None if rcv is None else rcv - start), NA, NA,
            fmt.us(stop - last_exec), fmt.us(None if rcv is None else last_exec - rcv),
            fmt.us(stop - start)]


def _round_rows(lanes: list[dict], stamps: list[list], rnd: int | None) -> list[list[str]]:
    rows, sched, cores = [], [], []
    ctrl_done = False
    for lane, st in zip(lanes, stamps):
        kind = str(lane.get("coreType", ""))
        lr = _lane_round(st, rnd, float(lane["freq"]))
        if lr is None:
            continue
        if kind == fmt.CTRL and not ctrl_done:
            rows.append(_ctrl_row(f"AICPU-CTRL-{lane['blockIdx']}", lr))
            ctrl_done = True
        elif kind == fmt.SCHED:
            sched.append((int(lane["blockIdx"]), _sched_row(f"AICPU-SCHED-{lane['blockIdx']}", lr)))
        elif is_sched_core_lane(kind):
            cores.append(lr)
    rows += [row for _, row in sorted(sched, key=lambda s: s[0])]
    if cores:
        rows.append(_aicore_row(cores))
    return rows


def analyze(lanes: list[dict]) -> list[Round]:
    """The table of every round found in the stamp names, in round order."""
    stamps = [_stamps(lane) for lane in lanes]
    rounds = sorted({s[2] for st in stamps for s in st if s[2] is not None})
    # a file without round suffixes is one pseudo-round, displayed as round1
    keys: list[int | None] = rounds or [None]
    return [Round(name=f"round{(r or 0) + 1}", rows=_round_rows(lanes, stamps, r)) for r in keys]


def display_width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in text)


def _pad(text: str, width: int) -> str:
    return text + " " * (width - display_width(text))


def render_round(rnd: Round) -> str:
    table = [rnd.header] + rnd.rows
    widths = [max(display_width(row[i]) for row in table) for i in range(len(rnd.header))]
    border = "| " + " | ".join("-" * w for w in widths) + " |"

    def line(row: list[str]) -> str:
        return "| " + " | ".join(_pad(c, w) for c, w in zip(row, widths)) + " |"

    title = f" {rnd.name} "
    # centred to the table width, the odd '=' (if any) going to the right
    left = (display_width(border) - display_width(title)) // 2
    right = display_width(border) - display_width(title) - left
    lines = ["=" * left + title + "=" * right, border, line(rnd.header), border]
    return "\n".join(lines + [line(r) for r in rnd.rows] + [border, ""]) + "\n"


def render(rounds: list[Round]) -> str:
    return "".join(render_round(r) for r in rounds)


def load_lanes(path: Path) -> list[dict]:
    """The lane array of one perf file; anything else is a one-paragraph ConfigError."""
    path = Path(path)
    what = ("a machine_trace_perf_data_<N>.json file (a JSON array of lanes "
            "{blockIdx, coreType, freq, tasks: [{name, end}]}, written with DUMP_DEVICE_PERF=true)")
    if path.is_dir():
        found = sorted(p.name for p in path.glob(fmt.PERF_GLOB))
        hint = f" It holds {', '.join(found)}; pass one of them." if found else ""
        raise ConfigError(f"analyze wants {what}, not a directory.{hint}", source=str(path))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"is not valid JSON ({exc}); analyze wants {what}. A truncated file "
                          f"usually means the run had not finished writing it.",
                          source=str(path)) from None
    if not isinstance(data, list) or not all(_is_lane(x) for x in data):
        raise ConfigError(f"does not look like {what}.", source=str(path))
    return data


def _is_lane(lane) -> bool:
    return (isinstance(lane, dict) and set(fmt.LANE_KEYS) <= lane.keys()
            and isinstance(lane["tasks"], list)
            and isinstance(lane["freq"], (int, float)) and lane["freq"] > 0
            and all(isinstance(t, dict) and "name" in t and isinstance(t.get("end"), int)
                    for t in lane["tasks"]))


def rounds_json(rounds: list[Round]) -> dict:
    """What the report reads: ``parsed/analyze.json``."""
    return {"header": list(HEADER),
            "rounds": [{"name": r.name, "rows": r.rows} for r in rounds]}
