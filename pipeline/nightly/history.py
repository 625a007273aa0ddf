"""Earlier nightly runs: one small JSON each under ``results/nightly/history/``.

A run is named by the id given on the command line (a date, a CI build
number) or else by the next counter (``0001``, ``0002``, ...), so the same
history and the same results always give the same files.  Rerunning an id
replaces its entry in place: the chart keeps its order, which is the order in
which ids were first recorded (``seq``).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from simcore.spec.errors import ConfigError

from ..emit.atomic import write_json

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#eeca3b",
           "#9d755d", "#bab0ac", "#ff9da6")


def check_run_id(run_id: str) -> str:
    if not RUN_ID.match(run_id):
        raise ConfigError(f"run id {run_id!r} is not usable as a file name; use letters, digits, "
                          f"'.', '_' or '-' (for example a date, 2026-11-29, or a build number).")
    return run_id


def load(history_dir: Path) -> list[dict]:
    entries = []
    for path in sorted(Path(history_dir).glob("*.json")):
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            continue   # a damaged old entry costs one point on the chart, not the nightly
        if isinstance(entry, dict) and "seq" in entry and "stages" in entry:
            entries.append(entry)
    return sorted(entries, key=lambda e: (e["seq"], e.get("run", "")))


def next_run_id(entries: list[dict]) -> str:
    counters = [int(e["run"]) for e in entries if str(e.get("run", "")).isdigit()]
    return f"{max(counters, default=0) + 1:04d}"


def record(history_dir: Path, run_id: str | None, verdict: str, stages: dict) -> tuple[str, list]:
    """Write this run's entry; return its id and the whole history, oldest first."""
    entries = load(history_dir)
    run_id = check_run_id(run_id) if run_id else next_run_id(entries)
    same = [e for e in entries if e.get("run") == run_id]
    seq = same[0]["seq"] if same else max((e["seq"] for e in entries), default=0) + 1
    entry = {"run": run_id, "seq": seq, "verdict": verdict, "stages": stages}
    write_json(Path(history_dir) / f"{run_id}.json", entry, indent=1)
    entries = [e for e in entries if e.get("run") != run_id] + [entry]
    return run_id, sorted(entries, key=lambda e: (e["seq"], e["run"]))


@dataclass
class Line:
    name: str
    color: str
    points: list[tuple[float, float, str]]    # (x, y, tooltip)

    @property
    def path(self) -> str:
        return " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in self.points)


@dataclass
class TrendChart:
    metric: str
    width: int
    height: int
    left: int
    top: int
    right: int          # x of the plot's right edge
    bottom: int
    lines: list[Line]
    x_labels: list[tuple[float, str]]
    y_ticks: list[tuple[float, str]]
    band: tuple[float, float] | None      # threshold band (y of +limit, y of -limit)
    zero: float = 0.0
    legend: list[tuple[str, str]] = field(default_factory=list)


def _percent(entry_stage: dict, metric: str) -> float | None:
    new = entry_stage.get("metrics", {}).get(metric)
    old = entry_stage.get("baseline", {}).get(metric)
    if not isinstance(new, (int, float)) or not isinstance(old, (int, float)) or not old:
        return None
    return 100.0 * (new - old) / abs(old)


def trend_chart(entries: list[dict], metric: str, limit_pct: float | None,
                width: int = 720, height: int = 260) -> TrendChart:
    """Percent change against the baseline of that night, one line per study/stage."""
    left, top, right, bottom = 60, 16, 70, height - 58   # room for slanted run ids
    keys = sorted({k for e in entries for k in e["stages"]})
    values = [v for e in entries for k in keys
              if (v := _percent(e["stages"].get(k, {}), metric)) is not None]
    span = max([abs(v) for v in values] + [limit_pct * 1.5 if limit_pct else 1.0, 1.0])
    step = (width - left - right) / max(len(entries) - 1, 1)
    xs = [left + i * step if len(entries) > 1 else (left + width - right) / 2
          for i in range(len(entries))]

    def y(v: float) -> float:
        return top + (bottom - top) * (span - v) / (2 * span)

    lines = []
    for i, key in enumerate(keys):
        color = PALETTE[i % len(PALETTE)]
        pts = [(xs[j], y(v), f"{key} run {e['run']}: {v:+.2f} %")
               for j, e in enumerate(entries)
               if (v := _percent(e["stages"].get(key, {}), metric)) is not None]
        lines.append(Line(key, color, pts))
    ticks = [(y(v), f"{v:+.1f} %") for v in (span, span / 2, 0.0, -span / 2, -span)]
    band = (y(limit_pct), y(-limit_pct)) if limit_pct else None
    return TrendChart(metric, width, height, left, top, width - right, bottom, lines,
                      [(x, e["run"]) for x, e in zip(xs, entries)], ticks, band, y(0.0),
                      [(ln.color, ln.name) for ln in lines])
