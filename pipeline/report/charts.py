"""Small inline SVG charts: vector graphics that need no script and no network."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    color: str
    title: str


@dataclass
class BarChart:
    width: int
    height: int
    bars: list[Bar]
    groups: list[tuple[float, str]]        # (x centre, label)
    ticks: list[tuple[float, str]]         # (y, label)
    y_label: str
    legend: list[tuple[str, str]]          # (color, name)
    plot_left: int
    plot_bottom: int


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    step = 10 ** (len(str(int(value))) - 1)
    for mult in (1, 2, 2.5, 5, 10):
        if value <= step * mult:
            return step * mult
    return step * 10


def grouped_bars(groups: list[str], series: list[tuple[str, str, list[float]]],
                 y_label: str, width: int = 720, height: int = 300) -> BarChart:
    """One group of bars per stage, one bar per series (name, color, values)."""
    left, bottom, top = 70, height - 60, 20
    plot_w, plot_h = width - left - 20, bottom - top
    vmax = _nice_max(max([v for _, _, vals in series for v in vals] + [0]))
    slot = plot_w / max(len(groups), 1)
    bar_w = slot * 0.7 / max(len(series), 1)
    bars, centres = [], []
    for g, name in enumerate(groups):
        x0 = left + g * slot + slot * 0.15
        centres.append((left + (g + 0.5) * slot, name))
        for s, (sname, color, vals) in enumerate(series):
            h = plot_h * vals[g] / vmax
            bars.append(Bar(x0 + s * bar_w, bottom - h, bar_w * 0.95, h, color,
                            f"{name} {sname}: {vals[g]:.2f}"))
    ticks = [(bottom - plot_h * i / 4, f"{vmax * i / 4:g}") for i in range(5)]
    return BarChart(width, height, bars, centres, ticks, y_label,
                    [(c, n) for n, c, _ in series], left, bottom)
