"""Reports opened from disk in headless Chromium: the swimlane draws, hover works, the page
logs no error and asks the network for nothing; a 100,000-task report pans smoothly.

Talks the Chrome DevTools protocol over --remote-debugging-pipe (fd 3/4, NUL-framed
JSON), so it needs no Python package beyond the standard library.  Skips when no
chromium is installed.  Screenshots land in pytest's tmp dir (printed, kept as
artifacts) or in $PTOLAB_ARTIFACTS when set.
"""
from __future__ import annotations

import base64
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import polars as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = next((p for p in (os.environ.get("PTOLAB_CHROMIUM"), shutil.which("chromium"),
                             shutil.which("chromium-browser"), shutil.which("google-chrome"))
                 if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1000", "--remote-debugging-pipe"]


class Browser:
    """A headless Chromium driven over the DevTools pipe; one page session."""

    def __init__(self, profile: Path):
        cmd_r, self._cmd_w = os.pipe()
        self._resp_r, resp_w = os.pipe()

        def child_fds():                      # Chromium reads fd 3 and writes fd 4
            # via fresh copies: dup2 onto itself would keep close-on-exec set
            high_r, high_w = os.dup(cmd_r), os.dup(resp_w)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}",
                                      "about:blank"], preexec_fn=child_fds, close_fds=False,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(cmd_r)
        os.close(resp_w)
        self._buf, self._id, self.events = b"", 0, []
        page = next(t for t in self.call("Target.getTargets")["targetInfos"]
                    if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"],
                                 flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.page(f"{domain}.enable")

    def _read(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\0" not in self._buf:
            if time.monotonic() > deadline:
                raise TimeoutError("no message from chromium")
            chunk = os.read(self._resp_r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: str | None = None, timeout: float = 60, **params):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read(timeout)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def page(self, method: str, **params):
        return self.call(method, self.session, **params)

    def js(self, expression: str):
        res = self.page("Runtime.evaluate", expression=expression, returnByValue=True,
                        awaitPromise=True)
        if "exceptionDetails" in res:
            raise AssertionError(f"JS failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def open(self, path: Path) -> None:
        seen = len(self.events)
        self.page("Page.navigate", url=path.resolve().as_uri())
        deadline = time.monotonic() + 60
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events[seen:]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} did not load")
            self.events.append(self._read(60))

    def mouse(self, kind: str, x: float, y: float, buttons: int = 0) -> None:
        extra = {"button": "left", "clickCount": 1} if kind != "mouseMoved" or buttons else {}
        self.page("Input.dispatchMouseEvent", type=kind, x=x, y=y, buttons=buttons, **extra)

    def screenshot(self, path: Path) -> Path:
        data = self.page("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    def problems(self) -> tuple[list[str], list[str]]:
        """(console errors and exceptions, requests that did not go to a file: URL)."""
        errors, remote = [], []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                errors.append(json.dumps(p["exceptionDetails"])[:400])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                errors.append(json.dumps(p.get("args"))[:400])
            elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
                errors.append(p["entry"].get("text", "")[:400])
            elif m == "Network.requestWillBeSent":
                url = p["request"]["url"]
                if not url.startswith(("file:", "data:", "about:")):
                    remote.append(url)
        return errors, remote

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except Exception:   # noqa: BLE001 - it may already be gone
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._cmd_w)
        os.close(self._resp_r)


@pytest.fixture
def browser(tmp_path):
    profile = Path(tempfile.mkdtemp(prefix="ptolab-chromium-"))
    b = Browser(profile)
    yield b
    b.close()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def artifacts(tmp_path) -> Path:
    out = Path(os.environ.get("PTOLAB_ARTIFACTS", tmp_path / "artifacts"))
    out.mkdir(parents=True, exist_ok=True)
    return out


def _big_report_module():
    spec = importlib.util.spec_from_file_location("big_report", ROOT / "benchmarks" /
                                                  "big_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def study_report(request) -> Path:
    """The shipped studies through the real workflow (the session's default build).

    PTOLAB_TEST_RESULTS=<results dir> reuses reports built elsewhere (debugging).
    """
    if os.environ.get("PTOLAB_TEST_RESULTS"):
        return Path(os.environ["PTOLAB_TEST_RESULTS"])
    return request.getfixturevalue("default_build") / "results"


# the centre of the first bar of the first lane, in page coordinates
FIRST_BAR = """(() => { const v = window.ptolabSwimlanes[0];
  v.canvas.scrollIntoView(); const r = v.canvas.getBoundingClientRect();
  const i = v.first[0]; const x = v.x(v.start[i] + v.dur[i] / 2);
  return [r.left + x, r.top + 22 + v.lane[i] * v.row + v.row / 2]; })()"""


# the centre of the first bar whose label is a script tag, zoomed in so it is wide
EVIL_BAR = """(() => { const v = window.ptolabSwimlanes[0];
  const bad = v.d.labels.findIndex(l => l.startsWith('<script>'));
  let i = 0; while (v.labelIdx[i] !== bad) i++;
  v.t0 = v.start[i] - v.dur[i]; v.span = v.dur[i] * 4; v.draw();
  v.canvas.scrollIntoView(); const r = v.canvas.getBoundingClientRect();
  return [r.left + v.x(v.start[i] + v.dur[i] / 2), r.top + 22 + v.lane[i] * v.row + v.row / 2];
})()"""


def _canvas_ink(b: Browser) -> int:
    """Non-white pixels in the first swimlane canvas: proof that bars were drawn."""
    return b.js("""(() => { const c = window.ptolabSwimlanes[0].canvas;
      const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
      for (let i = 0; i < d.length; i += 4) if (d[i+3] && (d[i] < 200 || d[i+2] < 200)) n++;
      return n; })()""")


def _check_page(b: Browser, report: Path, shots: Path, name: str) -> None:
    b.open(report)
    assert b.js("window.ptolabSwimlanes.length") >= 1
    assert _canvas_ink(b) > 500
    x, y = b.js(FIRST_BAR)
    b.mouse("mouseMoved", x, y)
    tip = b.js("(() => { const t = document.querySelector('.sl-tip');"
               " return t.hidden ? null : t.textContent; })()")
    assert tip and "duration:" in tip and "label:" in tip and "hashOrder:" in tip, tip
    b.screenshot(shots / f"{name}.png")
    errors, remote = b.problems()
    assert not errors, errors
    assert not remote, remote


def test_study_reports_draw_hover_offline(browser, study_report, artifacts):
    reports = sorted(study_report.glob("*/report.html"))
    assert reports
    for report in reports:
        _check_page(browser, report, artifacts, report.parent.name)
    browser.open(study_report / "index.html")
    assert browser.js("document.querySelectorAll('#studies a').length") >= len(reports)
    browser.screenshot(artifacts / "index.png")
    errors, remote = browser.problems()
    assert not errors and not remote, (errors, remote)
    print(f"screenshots in {artifacts}")


# every bar of the stage chart: stage, series, value, its drawn height and bottom, the scale
STAGE_BARS = """(() => { const svg = document.querySelector('svg.stage-bars');
  const zero = +svg.dataset.zero, top = +svg.dataset.top, vmax = +svg.dataset.vmax;
  return [...svg.querySelectorAll('rect[data-value]')].map(r => { const b = r.getBBox();
    return {stage: r.dataset.stage, series: r.dataset.series, value: +r.dataset.value,
            height: b.height, bottom: b.y + b.height, unit: (zero - top) / vmax, zero}; }); })()"""

# per stage section: the Try lines, the run-file links, the cores drawn, the knobs shown
STAGES = """(() => [...document.querySelectorAll('section.stage')].map(s => ({
  stage: s.id.slice(6),
  tries: [...s.querySelectorAll('.try-line')].map(c => c.textContent),
  links: [...s.querySelectorAll('.run-files a')].map(a => a.getAttribute('href')),
  linkLabels: [...s.querySelectorAll('.run-files li')].filter(li => li.querySelector('a'))
               .map(li => li.querySelector('b').textContent),
  chartCores: [...s.querySelectorAll('svg.core-chart rect[data-core]')].map(r => r.dataset.core),
  laneCores: (window.ptolabSwimlanes.find(v => v.root.closest('section') === s) || {d: {}})
               .d.coreLanes,
  phaseTables: s.querySelectorAll('table.phases').length,
  phaseReadings: [...s.querySelectorAll('.phase-reading')].map(p => p.textContent),
  ran: Object.fromEntries([...document.querySelectorAll(
         '#stage-table tr[data-stage="' + s.id.slice(6) + '"] code.knob')]
         .map(c => [c.dataset.key, c.textContent])) })))()"""


# the first core lane of every swimlane at its initial zoom: inked pixels on the lane's
# middle scanline, against the union of its bars each widened to the 2 px minimum
LANE_INK = """(() => window.ptolabSwimlanes.map(v => {
  const r = v.canvas.width / v.w, y = Math.round((22 + v.row / 2) * r);
  const row = v.ctx.getImageData(0, y, v.canvas.width, 1).data;
  let ink = 0;
  for (let x = Math.round(120 * r); x < v.canvas.width; x++) {
    const i = 4 * x; if (row[i + 3] && (row[i] < 230 || row[i + 1] < 230 || row[i + 2] < 230)) ink++; }
  const spans = [];
  for (let i = v.first[0]; i < v.first[1]; i++) {
    const a = Math.floor(v.x(v.start[i])), b = Math.max(a + 2, v.x(v.start[i] + v.dur[i]));
    spans.push([a, Math.min(b, v.w)]); }
  spans.sort((p, q) => p[0] - q[0]);
  let want = 0, end = -1;
  for (const [a, b] of spans) { if (b > end) { want += b - Math.max(a, end); end = b; } }
  return {ink: ink / r, want, row: v.row, lanes: v.d.lanes.length}; }))()"""


def _configs(results: Path) -> Path:
    """The configs the reports were built from (the build's scratch copy, else the repo's)."""
    here = results.parent / "configs"
    return here if here.is_dir() else ROOT / "configs"


def _check_truth(b: Browser, report: Path, plan) -> None:
    from pipeline.report.knobs import resolve, value_text
    sp = plan.study(report.parent.name)
    results = report.parent
    bars = b.js(STAGE_BARS)
    assert len(bars) == 2 * len(sp.study.stages)
    for bar in bars:
        # each bar is the stage's value, drawn from zero: height = value x px-per-us
        metric = json.loads((results / bar["stage"] / "parsed" / "metrics.json").read_text())
        assert bar["value"] == pytest.approx(metric[bar["series"]], abs=0.006), bar
        assert bar["height"] == pytest.approx(bar["value"] * bar["unit"], abs=0.05), bar
        assert bar["bottom"] == pytest.approx(bar["zero"], abs=0.05), bar
    for lane in b.js(LANE_INK):
        # sub-pixel tasks still show: every bar of the lane inks at least 2 px
        assert lane["ink"] >= 0.9 * lane["want"], lane
        assert lane["row"] >= 14 and (lane["lanes"] > 8 or lane["row"] > 14), lane
    sections = b.js(STAGES)
    assert [s["stage"] for s in sections] == [st.name for st in sp.study.stages]
    for sec, stage in zip(sections, sp.study.stages):
        ran = resolve(sp.kernel_path, stage.set)
        for line in sec["tries"]:
            # runs as printed: no placeholder, and the real --set parser and the kernel's
            # validation accept it (check raises otherwise)
            assert "<" not in line and ">" not in line and "..." not in line, line
            ran.check(line)
        for key in stage.set:                      # the knob values the stage ran
            assert sec["ran"][key] == f"{key}={value_text(ran.value(key))}", sec["ran"]
        tasks = pl.read_parquet(results / stage.name / "parsed" / "tasks.parquet")
        ran_cores = tasks.select("core_type", "core").unique().height
        assert len(sec["chartCores"]) == ran_cores          # only the cores that ran
        assert sec["laneCores"] == ran_cores
        if sec["phaseTables"]:        # the AICore row's columns are read out under the table
            assert len(sec["phaseReadings"]) == sec["phaseTables"]
            assert all("do not overlap" in t for t in sec["phaseReadings"])
        assert {"bubble_analysis.log", "dyn_topo.txt", "program.json",
                "perf data"} <= set(sec["linkLabels"])
        for href in sec["links"]:
            assert not href.startswith(("/", "file:")) and (results / href).is_file(), href


def test_study_reports_tell_the_truth(browser, study_report):
    """Bars equal values, every Try runs, core charts show the cores that ran, the run
    files are linked and resolve, and the index follows the workflow file's order."""
    import yaml

    from pipeline.workflow import load_plan
    configs = _configs(study_report)
    workflow = yaml.safe_load((configs / "workflow.yaml").read_text(encoding="utf-8"))
    plan = load_plan(configs, workflow)
    tries = 0
    for name in workflow["studies"]:
        report = study_report / name / "report.html"
        browser.open(report)
        _check_truth(browser, report, plan)
        tries += browser.js("document.querySelectorAll('.try-line').length")
    assert tries > 0
    browser.open(study_report / "index.html")
    order = browser.js("[...document.querySelectorAll('#studies tr[data-study]')]"
                       ".map(r => r.dataset.study)")
    assert order == workflow["studies"]
    errors, remote = browser.problems()
    assert not errors and not remote, (errors, remote)


def test_escaped_labels_stay_text(browser, tmp_path, artifacts):
    big = _big_report_module()
    study, stages = big.make_study(tmp_path / "esc", n=600)
    from pipeline.report.render import render_study
    render_study(study, stages, stages / "report.html")
    _check_page(browser, stages / "report.html", artifacts, "escaped")
    # one data block and the viewer: the label made no element and opened no dialog
    assert browser.js("document.querySelectorAll('script').length") == 2
    assert not [e for e in browser.events if e.get("method") == "Page.javascriptDialogOpening"]
    legend = browser.js("document.querySelector('.legend').textContent")
    assert "<script>alert(1)</script>" in legend
    x, y = browser.js(EVIL_BAR)
    browser.mouse("mouseMoved", x, y)
    assert "label: <script>alert(1)</script>" in browser.js(
        "document.querySelector('.sl-tip').textContent")


PAN = """(async () => {
  const v = window.ptolabSwimlanes[0]; const frames = [];
  v.reset(); if (%(zoom)s !== 1) v.zoomAt(120 + (v.w - 120) / 2, %(zoom)s); v.draw();
  v.stats.times = [];
  let last = performance.now();
  for (let i = 0; i < 120; i++) {
    v.panBy(i < 60 ? -7 : 7);
    await new Promise(r => requestAnimationFrame(r));
    const now = performance.now(); frames.push(now - last); last = now;
  }
  const d = v.stats.times.slice().sort((a, b) => a - b);
  const f = frames.slice(1).sort((a, b) => a - b);
  const q = (a, p) => a[Math.min(a.length - 1, Math.floor(a.length * p))];
  return {n: v.n, draws: d.length, draw_mean: d.reduce((a, b) => a + b, 0) / d.length,
          draw_p95: q(d, 0.95), frame_mean: f.reduce((a, b) => a + b, 0) / f.length,
          frame_p95: q(f, 0.95)};
})()"""


def test_100k_tasks_pan_smoothly(browser, tmp_path, artifacts):
    big = _big_report_module()
    study, stages = big.make_study(tmp_path / "big", n=100_000)
    from pipeline.report.render import render_study
    t = time.perf_counter()
    render_study(study, stages, stages / "report.html")
    render_s = time.perf_counter() - t
    t = time.perf_counter()
    browser.open(stages / "report.html")
    load_s = time.perf_counter() - t
    assert browser.js("window.ptolabSwimlanes[0].n") >= 100_000
    results = {z: browser.js(PAN % {"zoom": z}) for z in (1, 0.1)}
    # a real drag through the input pipeline, as a user pans, from the canvas's middle
    x, y = browser.js("(() => { const c = window.ptolabSwimlanes[0].canvas;"
                      " c.scrollIntoView(); const r = c.getBoundingClientRect();"
                      " return [r.left + r.width / 2 - 300, r.top + 100]; })()")
    browser.js("window.ptolabSwimlanes[0].stats.times = []")
    browser.mouse("mousePressed", x + 300, y, buttons=1)
    for i in range(30):
        browser.mouse("mouseMoved", x + 300 - 10 * i, y, buttons=1)
    browser.mouse("mouseReleased", x, y)
    drag = browser.js("(() => { const t = window.ptolabSwimlanes[0].stats.times;"
                      " return [t.length, t.reduce((a, b) => a + b, 0) / (t.length || 1)]; })()")
    assert drag[0] >= 1                     # the drag panned (and so redrew) the view
    browser.screenshot(artifacts / "big_100k.png")
    errors, remote = browser.problems()
    assert not errors and not remote, (errors, remote)
    size_mb = (stages / "report.html").stat().st_size / 1e6
    print(f"\n100k report: {size_mb:.1f} MB, rendered in {render_s:.2f} s, loaded in "
          f"{load_s:.2f} s; mouse drag: {drag[0]} redraws, mean {drag[1]:.2f} ms; pan " + "; ".join(
              f"view {z:g}: draw mean {r['draw_mean']:.2f} ms p95 {r['draw_p95']:.2f} ms, "
              f"frame mean {r['frame_mean']:.2f} ms p95 {r['frame_p95']:.2f} ms"
              for z, r in results.items()))
    (artifacts / "frame_time.json").write_text(json.dumps(results, indent=1))
    for r in results.values():
        assert r["draw_p95"] < 50, r      # 20 fps even on a slow CI runner's software raster
