"""Metric changes against thresholds, and the evidence that explains them.

A change is classified once, here: *regression* (beyond threshold in the worse
direction, or any difference where no direction is better), *improvement*
(beyond threshold the other way), *within* (a difference the threshold
tolerates), *new* (a metric the baseline does not have) or *gone* (a baseline
metric the run no longer reports, which breaks the contract and so regresses).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from .config import NightlyConfig, Threshold

REGRESSION, IMPROVEMENT, WITHIN, NEW, GONE = "regression", "improvement", "within", "new", "gone"
# how bad a status is, worst first; a stage takes the worst status of its changes
RANK = {REGRESSION: 0, GONE: 0, IMPROVEMENT: 1, WITHIN: 2, NEW: 3, "unchanged": 4}
EPS = 1e-9   # parse rounds to 4 decimals, so anything smaller is representation noise


@dataclass
class Change:
    metric: str
    old: Any
    new: Any
    status: str
    threshold: str
    delta: float | None = None
    relative: float | None = None

    @property
    def score(self) -> float:
        """How far it moved, for ordering: relative change, infinite when unmeasurable."""
        if self.relative is None or math.isnan(self.relative):
            return math.inf
        return abs(self.relative)


def _numeric(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _beyond(th: Threshold, delta: float, relative: float) -> bool:
    if th.exact:
        return abs(delta) > EPS
    rel_ok = th.relative is None or abs(relative) > th.relative + EPS
    abs_ok = th.absolute is None or abs(delta) > th.absolute + EPS
    return rel_ok and abs_ok


def classify(metric: str, old: Any, new: Any, th: Threshold) -> Change | None:
    """The change of one metric, or None when it did not move."""
    if old is None:
        return Change(metric, old, new, NEW, th.describe())
    if new is None:
        return Change(metric, old, new, GONE, th.describe())
    if not (_numeric(old) and _numeric(new)):
        return None if old == new else Change(metric, old, new, REGRESSION, "exact")
    delta = float(new) - float(old)
    if abs(delta) <= EPS:
        return None
    relative = delta / abs(old) if old else math.inf
    if not _beyond(th, delta, relative):
        status = WITHIN
    elif th.worse == "any" or (delta > 0) == (th.worse == "higher"):
        status = REGRESSION
    else:
        status = IMPROVEMENT
    return Change(metric, old, new, status, th.describe(), delta, relative)


def _race_draw(change: Change, old: dict, new: dict, cfg: NightlyConfig) -> Change:
    """A racing stage's single run that moved beyond its threshold, while the baseline's
    value lies inside the new race range and the race's median stayed within its own
    threshold: another draw of the same race, not a change of the model's prediction."""
    m = change.metric
    lo, hi, med = (new.get(f"{m}_race_{k}") for k in ("min", "max", "median"))
    if change.status not in (REGRESSION, IMPROVEMENT) or not all(map(_numeric, (lo, hi, med))) \
            or not _numeric(change.old) or not lo - EPS <= change.old <= hi + EPS:
        return change
    median = classify(f"{m}_race_median", old.get(f"{m}_race_median"), med,
                      cfg.threshold(f"{m}_race_median"))
    if median is not None and median.status != WITHIN:
        return change
    return replace(change, status=WITHIN,
                   threshold=f"{change.threshold}; a race draw: the baseline's {_f(change.old)} "
                             f"lies in this run's race {_f(lo)}-{_f(hi)} and the median moved "
                             f"within its threshold")


def compare_metrics(old: dict, new: dict, cfg: NightlyConfig) -> tuple[list[Change], int]:
    """Every moved metric, worst first, and how many did not move."""
    changes, unchanged = [], 0
    for metric in sorted(set(old) | set(new)):
        change = classify(metric, old.get(metric), new.get(metric), cfg.threshold(metric))
        if change is None:
            unchanged += 1
        else:
            changes.append(_race_draw(change, old, new, cfg))
    changes.sort(key=lambda c: (RANK[c.status], -c.score, c.metric))
    return changes, unchanged


@dataclass
class Evidence:
    """One kind of evidence (dev tasks, leaf functions, pipes, swimlane) for a stage."""
    kind: str
    headline: str
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    more: int = 0       # rows left out of the table


def _f(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.4f}".rstrip("0").rstrip(".") if x != int(x) else f"{x:.1f}"
    return str(x)


def _arrow(old: Any, new: Any) -> str:
    return _f(old) if old == new else f"{_f(old)} → {_f(new)}"


def _signed(x: float) -> str:
    return f"{x:+.4f}".rstrip("0").rstrip(".")


TOP_ROWS = 8


def _mean_gap(rows: list[dict]) -> float | None:
    """Mean idle time from one dev task's last leaf task to the next one's first."""
    rows = sorted(rows, key=lambda r: r["seq"])
    gaps = [n["start_us"] - (c["start_us"] + c["span_us"]) for c, n in zip(rows, rows[1:])]
    return sum(gaps) / len(gaps) if gaps else None


def _moved_dev_tasks(old: list[dict], new: list[dict]) -> list[tuple[dict | None, dict]]:
    """(baseline row or None, current row) for every dev task that moved, latest end first."""
    by_seq = {r["seq"]: r for r in old}
    moved = [(by_seq.get(r["seq"]), r) for r in new
             if r["seq"] not in by_seq or any(abs(by_seq[r["seq"]][k] - r[k]) > EPS
                                              for k in ("leaf_tasks", "start_us", "span_us"))]

    def end_moved(pair):
        b, r = pair
        return abs(r["start_us"] + r["span_us"] - b["start_us"] - b["span_us"]) if b else math.inf

    return sorted(moved, key=lambda pair: (-end_moved(pair), pair[1]["seq"]))


def _where_time_went(old: list[dict], new: list[dict], span_change: float) -> list[str]:
    """Inside dev tasks (their spans) or between them (the idle gaps): the AICPU's side."""
    gap_old, gap_new = _mean_gap(old), _mean_gap(new)
    if gap_old is None or gap_new is None:
        return []
    if abs(gap_new - gap_old) <= EPS:
        return ["the idle gaps between dev tasks did not change, so the time moved inside "
                "dev tasks (leaf tasks and their scheduling)"] if abs(span_change) > EPS else []
    between = abs(gap_new - gap_old) * (len(new) - 1)
    where = ("between dev tasks (AICPU build, hand-over, dispatch)" if between > abs(span_change)
             else "inside dev tasks (leaf tasks and their scheduling)")
    return [f"the idle gap between consecutive dev tasks went {gap_old:.4g} → {gap_new:.4g} us "
            f"on average", f"so the time moved mostly {where}"]


def dev_task_evidence(old: list[dict] | None, new: list[dict] | None) -> Evidence | None:
    if not old and not new:
        return None
    moved = _moved_dev_tasks(old, new)
    if not moved and len(old) == len(new):
        return Evidence("dev tasks", "no dev task moved: same sizes, starts and spans")
    head = [f"dev tasks {len(old)} → {len(new)}"] if len(old) != len(new) else []
    span = sum(r["span_us"] - b["span_us"] for b, r in moved if b is not None)
    head.append(f"{len(moved)} of {len(new)} dev tasks moved; their spans changed by "
                f"{_signed(span)} us in total")
    head += _where_time_went(old, new, span)
    rows = [[str(r["seq"]), _arrow(b and b["leaf_tasks"], r["leaf_tasks"]),
             _arrow(b and b["start_us"], r["start_us"]), _arrow(b and b["span_us"], r["span_us"]),
             _signed(r["span_us"] - b["span_us"]) if b else "new"]
            for b, r in moved[:TOP_ROWS]]
    return Evidence("dev tasks", "; ".join(head),
                    ["dev task", "leaf tasks", "start (us)", "span (us)", "Δ span (us)"],
                    rows, max(0, len(moved) - TOP_ROWS))


def leaf_evidence(old: dict | None, new: dict | None) -> Evidence | None:
    if old is None or new is None:
        return None
    rows, notes = [], []
    for key in sorted(set(old) | set(new)):
        b, r = old.get(key), new.get(key)
        if b is None or r is None:
            rows.append([key, "appeared" if b is None else "gone",
                         _f((r or b)["tasks"]), _f((r or b)["mean_us"]), "", ""])
            continue
        fields = ("tasks", "mean_us", "max_us", "total_us")
        if all(b[k] == r[k] for k in fields) and b["hash"] == r["hash"]:
            continue
        code = "same code" if b["hash"] == r["hash"] else "recompiled (hash differs)"
        rows.append([key, code, _arrow(b["tasks"], r["tasks"]), _arrow(b["mean_us"], r["mean_us"]),
                     _signed(r["mean_us"] - b["mean_us"]), _arrow(b["total_us"], r["total_us"])])
        notes.append(f"{key} {code}, mean {_arrow(b['mean_us'], r['mean_us'])} us per task")
    if not rows:
        return Evidence("leaf functions", "no leaf function moved: same code, task counts and "
                        "run times")
    head = f"{len(rows)} leaf function(s) moved" + (f": {notes[0]}" if notes else "")
    return Evidence("leaf functions", head,
                    ["leaf function", "code", "tasks", "mean us", "Δ mean us", "total us"],
                    rows[:TOP_ROWS], max(0, len(rows) - TOP_ROWS))


def pipe_evidence(old: dict | None, new: dict | None) -> Evidence | None:
    if old is None or new is None:
        return None
    rows = [[pipe, _arrow((old.get(pipe) or {}).get("ops"), (new.get(pipe) or {}).get("ops")),
             _arrow((old.get(pipe) or {}).get("bytes"), (new.get(pipe) or {}).get("bytes"))]
            for pipe in sorted(set(old) | set(new)) if old.get(pipe) != new.get(pipe)]
    if not rows:
        return Evidence("pipes", "pipe work unchanged (same ops and bytes on every pipe): the "
                        "time moved through costs or scheduling, not through the work given "
                        "to the pipes")
    return Evidence("pipes", f"work moved on {len(rows)} pipe(s): "
                    + ", ".join(f"{r[0]} bytes {r[2]}" for r in rows),
                    ["pipe", "ops", "bytes"], rows)


def evidence(old: dict, new: dict) -> list[Evidence]:
    """What in the stage's tables moved between the baseline summary and this run."""
    found = [dev_task_evidence(old.get("dev_task_spans"), new.get("dev_task_spans")),
             leaf_evidence(old.get("leaf_functions"), new.get("leaf_functions")),
             pipe_evidence(old.get("pipes"), new.get("pipes"))]
    same = old.get("swimlane_sha256") and old.get("swimlane_sha256") == new.get("swimlane_sha256")
    if same:
        found.append(Evidence("swimlane", "swimlane byte-identical to the baseline run's: the "
                              "AICore side did not move"))
    return [e for e in found if e is not None]
