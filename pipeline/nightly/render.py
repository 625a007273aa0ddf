"""The nightly report: Jinja2, self-contained (inline CSS and SVG, no script, no network)."""
from __future__ import annotations

import math

from ..report.render import environment
from .compare import Change
from .config import NightlyConfig
from .history import trend_chart


def _number(x) -> str:
    if isinstance(x, bool) or x is None:
        return "–" if x is None else str(x)
    if isinstance(x, float):
        return f"{x:,.4f}".rstrip("0").rstrip(".")
    if isinstance(x, int):
        return f"{x:,}"
    return str(x)


def _delta(c: Change) -> str:
    if c.delta is None:
        return "–"
    rel = "" if c.relative is None or math.isinf(c.relative) else f" ({c.relative * 100:+.2f} %)"
    return f"{c.delta:+,.4f}".rstrip("0").rstrip(".") + rel


def render_report(cfg: NightlyConfig, run_id: str, code: int, summary: str, results: list,
                  entries: list[dict]) -> str:
    charts = []
    for metric in cfg.trend:
        th = cfg.threshold(metric)
        charts.append(trend_chart(entries, metric, th.relative * 100 if th.relative else None))
    env = environment()
    env.filters["number"] = _number
    env.filters["delta"] = _delta
    return env.get_template("nightly.html.j2").render(
        run_id=run_id, code=code, summary=summary, results=results, charts=charts,
        studies=cfg.studies, fail_on_improvement=cfg.fail_on_improvement)
