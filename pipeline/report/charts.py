"""Inline SVG charts: vector graphics with labelled axes that need no script or network.

Each builder returns Markup; every piece of text passes through ``escape`` so a stage
or label name cannot inject markup.  Numbers are formatted with fixed precision so the
same inputs give byte-identical SVG.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from markupsafe import Markup, escape

KERNEL, E2E, BUSY, IDLE, BETTER, WORSE = ("#4c78a8", "#f58518", "#4c78a8", "#e3e3e3",
                                         "#54a24b", "#e45756")


@dataclass
class Frame:
    """Plot area inside an SVG of width x height, with margins for axis labels."""
    width: int
    height: int
    left: int = 70
    right: int = 20
    top: int = 20
    bottom: int = 60

    @property
    def x1(self) -> float:
        return self.width - self.right

    @property
    def y1(self) -> float:
        return self.height - self.bottom

    def y(self, value: float, vmax: float) -> float:
        return self.y1 - (self.y1 - self.top) * value / vmax


def _f(v: float) -> str:
    return f"{v:.1f}"


def nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    step = 10 ** math.floor(math.log10(value))
    return next(step * m for m in (1, 2, 2.5, 5, 10) if value <= step * m + 1e-12)


def _text(x, y, text, anchor="middle", extra="") -> str:
    return (f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}"{extra}>'
            f'{escape(text)}</text>')


def _svg(frame: Frame, body: list[str], title: str, extra: str = "") -> Markup:
    return Markup(f'<svg{extra} xmlns="http://www.w3.org/2000/svg" width="{frame.width}" '
                  f'height="{frame.height}" viewBox="0 0 {frame.width} {frame.height}" '
                  f'role="img" aria-label="{escape(title)}">' + "".join(body) + "</svg>")


def _y_axis(frame: Frame, vmax: float, label: str) -> list[str]:
    out = [f'<line x1="{frame.left}" y1="{frame.top}" x2="{frame.left}" y2="{_f(frame.y1)}" '
           f'stroke="#444"/>',
           f'<line x1="{frame.left}" y1="{_f(frame.y1)}" x2="{_f(frame.x1)}" '
           f'y2="{_f(frame.y1)}" stroke="#444"/>']
    for i in range(5):
        y = frame.y(vmax * i / 4, vmax)
        out.append(f'<line x1="{frame.left - 4}" y1="{_f(y)}" x2="{_f(frame.x1)}" '
                   f'y2="{_f(y)}" stroke="#eee"/>')
        out.append(_text(frame.left - 6, y + 4, f"{vmax * i / 4:g}", "end"))
    mid = (frame.top + frame.y1) / 2
    out.append(_text(14, mid, label, "middle", f' transform="rotate(-90 14 {_f(mid)})"'))
    return out


def _legend(frame: Frame, items: list[tuple[str, str]], hollow: set[str] = frozenset()) -> list[str]:
    out = []
    for i, (color, name) in enumerate(items):
        x, y = frame.left + 10 + i * 150, frame.height - 22
        fill = "none" if name in hollow else color
        out.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{fill}" '
                   f'stroke="{color}"/>')
        out.append(_text(x + 16, y + 10, name, "start"))
    return out


def stage_bars(stages: list[str], kernel: list[float | None], e2e: list[float | None],
               races: dict[str, list[tuple[float, float] | None]] | None = None,
               workloads: list[str] | None = None) -> Markup:
    """Per stage, kernel_us and e2e_us each as a bar from zero to the stage's value.

    The change against the previous stage is printed under the stage's name (green a
    gain, red a regression), never drawn as a bar: a tall bar always means a slow stage.
    Bars carry their value (data-value) and the SVG its scale (data-zero, data-top,
    data-vmax), so a test can check that every bar's height is its value.  ``races``:
    per series, each stage's (smallest, largest) run over the chip's race variants, drawn
    as a whisker across the bar (data-min, data-max).  ``workloads``: per stage, the problem
    it runs; a change is printed only against the previous stage of the same workload.
    """
    races = races or {}
    workloads = workloads or [""] * len(stages)
    frame = Frame(max(680, 130 * len(stages) + 90), 350, bottom=90)
    spans = [hi for series in races.values() for r in series if r is not None for hi in r]
    vmax = nice_max(max([v for v in kernel + e2e if v is not None] + spans + [0.0]))
    slot = (frame.x1 - frame.left) / max(len(stages), 1)
    body = _y_axis(frame, vmax, "time (us)")
    for g, name in enumerate(stages):
        for s, (series, vals, color) in enumerate((("kernel_us", kernel, KERNEL),
                                                    ("e2e_us", e2e, E2E))):
            x, w = frame.left + g * slot + slot * (0.15 + 0.36 * s), slot * 0.32
            body += _value_bar(frame, vmax, x, w, vals[g], color, name, series)
            race = races.get(series, [None] * len(stages))[g]
            if race is not None:
                body += _whisker(frame, vmax, x + w / 2, w * 0.3, race, name, series)
        cx = frame.left + (g + 0.5) * slot
        body.append(_text(cx, frame.y1 + 16, name))
        prev = next((p for p in range(g - 1, -1, -1) if workloads[p] == workloads[g]), None)
        if prev is not None:
            body.append(_change(cx, frame.y1 + 31, "kernel", kernel[prev], kernel[g]))
            body.append(_change(cx, frame.y1 + 45, "e2e", e2e[prev], e2e[g]))
        elif g:
            body.append(_text(cx, frame.y1 + 31, f"workload {workloads[g]}"))
    body += _legend(frame, [(KERNEL, "kernel_us"), (E2E, "e2e_us"),
                            (BETTER, "faster than previous"), (WORSE, "slower than previous")])
    scale = (f' class="stage-bars" data-zero="{_f(frame.y1)}" '
             f'data-top="{_f(frame.y(vmax, vmax))}" data-vmax="{vmax:g}"')
    return _svg(frame, body, "kernel and end-to-end time per stage", scale)


def _value_bar(frame, vmax, x, w, value, color, stage, series) -> list[str]:
    if value is None:       # not in the stage's metrics: no bar, rather than a zero
        return [_text(x + w / 2, frame.y1 - 4, "n/a")]
    top = frame.y(value, vmax)
    tip = f"{stage} {series}: {value:.2f} us"
    return [f'<rect x="{_f(x)}" y="{top:.3f}" width="{_f(w)}" '
            f'height="{frame.y1 - top:.3f}" fill="{color}" data-stage="{escape(stage)}" '
            f'data-series="{series}" data-value="{value:.2f}"><title>{escape(tip)}</title></rect>',
            _text(x + w / 2, top - 4, f"{value:.1f}")]


def _whisker(frame, vmax, cx, half, race, stage, series) -> list[str]:
    """The race's range of one bar: a vertical line with caps at its smallest and largest
    run."""
    lo, hi = frame.y(race[0], vmax), frame.y(race[1], vmax)
    tip = f"{stage} {series}: race {race[0]:.2f}-{race[1]:.2f} us"
    return [f'<g class="race" data-stage="{escape(stage)}" data-series="{series}" '
            f'data-min="{race[0]:.2f}" data-max="{race[1]:.2f}" stroke="#222">'
            f'<title>{escape(tip)}</title>'
            f'<line x1="{_f(cx)}" y1="{hi:.3f}" x2="{_f(cx)}" y2="{lo:.3f}"/>'
            f'<line x1="{_f(cx - half)}" y1="{hi:.3f}" x2="{_f(cx + half)}" y2="{hi:.3f}"/>'
            f'<line x1="{_f(cx - half)}" y1="{lo:.3f}" x2="{_f(cx + half)}" y2="{lo:.3f}"/>'
            f'</g>']


def _change(x, y, what, prev, value) -> str:
    """'kernel −97.7 %' under a stage: the change from the previous stage, coloured."""
    if not prev or value is None:
        return _text(x, y, f"{what} –")
    pct = (value - prev) / prev * 100
    fill = BETTER if value < prev else WORSE if value > prev else "#777"
    return _text(x, y, f"{what} {pct:+.1f} %".replace("-", "−"), "middle",
                 f' fill="{fill}" class="change"')


@dataclass
class Sweep:
    knob: str
    stages: list[str]
    x: list[float]
    kernel: list[float]
    e2e: list[float]
    documented: list[dict]
    # per series, each stage's (smallest, largest) run over the chip's race variants or None
    races: dict = field(default_factory=dict)


def _x_scale(xs: list[float], frame: Frame):
    lo, hi = min(xs), max(xs)
    logx = lo > 0 and hi / lo >= 16       # stitch sweeps span 1..512: log spacing reads better
    f = math.log2 if logx else (lambda v: v)
    a, b = f(lo), f(hi)
    span = (b - a) or 1.0
    return (lambda v: frame.left + 30 + (frame.x1 - frame.left - 60) * (f(v) - a) / span), logx


def sweep_chart(sweep: Sweep) -> Markup:
    """kernel_us and e2e_us against one numeric knob, documented figures as hollow marks."""
    frame = Frame(560, 320)
    values = sweep.kernel + sweep.e2e + [v for d in sweep.documented
                                         for k, v in d.items()
                                         if k in ("kernel_us", "e2e_us") and v is not None] \
        + [r[1] for series in sweep.races.values() for r in series if r is not None]
    vmax = nice_max(max(values + [0.0]))
    xs, logx = _x_scale(sweep.x, frame)
    body = _y_axis(frame, vmax, "time (us)")
    for v in sweep.x:
        body.append(_text(xs(v), frame.y1 + 16, f"{v:g}"))
    axis = f"{sweep.knob}" + (" (log scale)" if logx else "")
    body.append(_text((frame.left + frame.x1) / 2, frame.y1 + 32, axis))
    for series, vals, color in (("kernel_us", sweep.kernel, KERNEL), ("e2e_us", sweep.e2e, E2E)):
        pts = " ".join(f"{_f(xs(x))},{_f(frame.y(v, vmax))}" for x, v in zip(sweep.x, vals))
        body.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
        races = sweep.races.get(series, [None] * len(sweep.x))
        for x, v, stage, race in zip(sweep.x, vals, sweep.stages, races):
            body.append(f'<circle cx="{_f(xs(x))}" cy="{_f(frame.y(v, vmax))}" r="4" '
                        f'fill="{color}"><title>{escape(f"{stage} {series}: {v:.2f} us")}'
                        f'</title></circle>')
            if race is not None:
                body += _whisker(frame, vmax, xs(x), 4, race, stage, series)
        for x, doc, stage in zip(sweep.x, sweep.documented, sweep.stages):
            if doc.get(series) is not None:
                body.append(f'<rect x="{_f(xs(x) - 5)}" y="{_f(frame.y(doc[series], vmax) - 5)}" '
                            f'width="10" height="10" fill="none" stroke="{color}" '
                            f'stroke-width="2"><title>'
                            f'{escape(f"{stage} documented {series}: {doc[series]:.2f} us")}'
                            f'</title></rect>')
    legend = [(KERNEL, "kernel_us"), (E2E, "e2e_us")]
    if any(r is not None for series in sweep.races.values() for r in series):
        body.append(_text(frame.x1, frame.top + 12, "whiskers: race range", "end"))
    if any(sweep.documented):
        legend.append(("#444", "documented (hollow)"))
    body += _legend(frame, legend, {"documented (hollow)"})
    return _svg(frame, body, f"{sweep.knob} sweep")


def core_bars(cores: list[tuple[str, float]], span_us: float) -> Markup:
    """Busy and idle time per core within the kernel window, one horizontal bar each.

    The caller passes the cores that ran; idle cores are counted in the text instead.
    Few cores get taller rows so one busy core still reads as a bar.
    """
    row = max(12, min(28, 240 // max(len(cores), 1)))
    frame = Frame(720, 50 + row * max(len(cores), 1) + 40, left=80, top=10, bottom=60)
    scale = (frame.x1 - frame.left) / (span_us or 1.0)
    body = []
    for i, (core, busy) in enumerate(cores):
        y = frame.top + i * row
        idle = max(span_us - busy, 0.0)
        tip = f"{core}: busy {busy:.2f} us, idle {idle:.2f} us ({busy / (span_us or 1) * 100:.1f}% busy)"
        body.append(f'<g><title>{escape(tip)}</title>'
                    f'<rect x="{frame.left}" y="{y}" width="{_f(busy * scale)}" '
                    f'height="{row - 2}" fill="{BUSY}" data-core="{escape(core)}"/>'
                    f'<rect x="{_f(frame.left + busy * scale)}" y="{y}" '
                    f'width="{_f(idle * scale)}" height="{row - 2}" fill="{IDLE}"/></g>')
        body.append(_text(frame.left - 4, y + row / 2 + 3, core, "end", ' font-size="9"'))
    y_axis = frame.top + row * len(cores) + 2
    for i in range(5):
        x = frame.left + (frame.x1 - frame.left) * i / 4
        body.append(f'<line x1="{_f(x)}" y1="{y_axis}" x2="{_f(x)}" y2="{y_axis + 4}" stroke="#444"/>')
        anchor = "start" if i == 0 else "end" if i == 4 else "middle"
        body.append(_text(x, y_axis + 16, f"{span_us * i / 4:.2f}", anchor))
    body.append(_text((frame.left + frame.x1) / 2, y_axis + 32,
                      "time within the kernel window (us)"))
    frame.height = y_axis + 60
    body += _legend(frame, [(BUSY, "busy"), (IDLE, "idle")])
    return _svg(frame, body, "busy and idle time per core", ' class="core-chart"')
