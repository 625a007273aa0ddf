"""From an op in the report to the Python line that wrote it.

An imported op carries ``src`` (FILE.py:LINE); the compiler hands it to the leaf function's
ops (program.json's ``file``/``line``), the parser keeps it, and the report shows
``file.py:LINE`` links next to leaf functions, findings and swimlane tasks, plus the kernel
file with one anchor per line, all inside the one HTML file.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import pytest
import yaml

from conftest import PY_KERNEL_ARGS

from pipeline.frontend import kernel_text, trace_file
from pipeline.report import sources
from pipeline.report.render import render_study
from pipeline.runner import run_stage
from simcore.compiler import compile_kernel
from simcore.spec.hardware import load_hardware
from simcore.spec.kernel import Kernel

REPO = Path(__file__).resolve().parents[1]
PY = REPO / "tests" / "kernels_py"

STUDY = """\
name: py_softmax
description: the softmax kernel written in PyPTO's Python API
kernel: kernels/softmax.py:softmax
stages:
  - name: base
    description: the example's tiles
"""


def imported(path: Path, function=None) -> str:
    return kernel_text(trace_file(path, function, args=PY_KERNEL_ARGS.get(path.stem)), "test")


def op_srcs(body) -> dict[str, str]:
    out = {}
    for s in body:
        if "op" in s:
            out.setdefault(s["op"], s["src"])
        elif "loop" in s:
            out.update({k: v for k, v in op_srcs(s["body"]).items() if k not in out})
    return out


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """A one-stage study of the Python softmax kernel, simulated and reported."""
    root = tmp_path_factory.mktemp("srcrep")
    (root / "configs" / "kernels").mkdir(parents=True)
    (root / "configs" / "studies").mkdir()
    source = root / "configs" / "kernels" / "softmax.py"
    shutil.copy(PY / "softmax.py", source)
    study = root / "configs" / "studies" / "py_softmax.yaml"
    study.write_text(STUDY)
    kernel = root / "results" / "py_softmax" / "kernel.yaml"
    kernel.parent.mkdir(parents=True)
    kernel.write_text(imported(source, "softmax"))
    stage = root / "results" / "py_softmax" / "base"
    run_stage(kernel, {}, "dav_2201", stage, 1)
    report = root / "results" / "py_softmax" / "report.html"
    render_study(study, stage.parent, report, kernel)
    return {"root": root, "source": source, "study": study, "kernel": kernel, "stage": stage,
            "report": report, "html": report.read_text(encoding="utf-8")}


def test_each_imported_op_has_its_line_as_data():
    text = imported(PY / "softmax.py")
    cfg = yaml.safe_load(text)
    lines = (PY / "softmax.py").read_text().splitlines()
    got = op_srcs(cfg["body"])
    for op, src in got.items():
        file, _, line = src.partition(":")
        assert file == "softmax.py"
        # the line holds the call that made the op (operators count: e / s is the div)
        assert {"amax": "amax", "sum": "sum", "exp": "exp", "div": "/"}.get(op, "") \
            in lines[int(line) - 1]
    assert Kernel.model_validate(cfg).body


def test_src_never_changes_the_graph():
    """Two kernels differing only in their ops' src compile to the same counts."""
    hw = load_hardware("dav_2201")
    cfg = yaml.safe_load(imported(PY / "glm_attention.py"))

    def strip(body):
        for s in body:
            s.pop("src", None)
            strip(s.get("body", []))
    plain = json.loads(json.dumps(cfg))
    strip(plain["body"])
    a = compile_kernel(Kernel.model_validate(cfg), hw).counts()
    b = compile_kernel(Kernel.model_validate(plain), hw).counts()
    assert a == b


def test_program_and_parsed_ops_carry_the_lines(built):
    prog = json.loads((built["stage"] / "compile" / "program.json").read_text())
    located = [(op["opcode"], op["file"], op["line"]) for f in prog["functions"]
               for op in f.get("operations", []) if "file" in op]
    assert located and all(f == "softmax.py" for _, f, _ in located)
    cfg = yaml.safe_load(built["kernel"].read_text())
    want = {op.upper(): int(src.rpartition(":")[2]) for op, src in op_srcs(cfg["body"]).items()}
    for opcode, _, line in located:
        assert want[opcode] == line
    ops = pl.read_parquet(built["stage"] / "parsed" / "ops.parquet")
    assert set(ops["src"].drop_nulls()) == {f"softmax.py:{line}" for _, _, line in located}


def test_report_shows_the_source_with_an_anchor_per_line(built):
    html, lines = built["html"], built["source"].read_text().splitlines()
    assert 'id="kernel-source"' in html
    anchors = re.findall(r'<span class="src-line[^"]*" id="src-L(\d+)"', html)
    assert [int(a) for a in anchors] == list(range(1, len(lines) + 1))
    marked = {int(n) for n in re.findall(r'class="src-line has-op" id="src-L(\d+)"', html)}
    ops = pl.read_parquet(built["stage"] / "parsed" / "ops.parquet")
    assert marked == {int(s.rpartition(":")[2]) for s in ops["src"].drop_nulls()}
    # every link points at an anchor that exists
    targets = set(re.findall(r'href="#(src-L\d+)"', html))
    assert targets and targets <= {f"src-L{a}" for a in anchors}
    assert "⚠ This file changed" not in html
    # the file as the study names it: the same study built elsewhere gives the same report
    assert "configs/kernels/softmax.py" in html and str(built["root"]) not in html


def test_leaf_functions_and_findings_link_their_lines(built):
    html = built["html"]
    amax_line = next(i for i, t in enumerate(built["source"].read_text().splitlines(), 1)
                     if "pypto.amax(" in t)
    # the task graph names the leaf function 'softmax: AMAX' next to its line
    assert re.search(r"<code>softmax: AMAX</code> \(<span class=\"src\">softmax\.py:"
                     rf"<a class=\"src-link\" href=\"#src-L{amax_line}\"", html)
    # a finding that names a task or leaf function gets that op's line
    refs = re.findall(r'<span class="sources">Source: (.*?)</span><br>', html)
    assert refs and all("src-link" in r for r in refs)


def test_swimlane_bars_name_their_lines(built):
    html = built["html"]
    data = json.loads(re.search(r'<script type="application/json" id="swimlane-data-0">'
                                r'(.*?)</script>', html, re.S).group(1))
    assert data["codes"][0] == "" and all(c.startswith("softmax.py:") for c in data["codes"][1:])
    from pipeline.report.embed import typed  # noqa: F401 (format of codeIdx)
    assert "codeIdx" in data


def test_leaf_lines_and_task_leaves_by_hand():
    ops = pl.DataFrame({"func_hash": [7, 7, 7, 9], "func_name": ["k_leaf0"] * 3 + ["k_leaf1"],
                        "opmagic": [0, 1, 2, 0], "opcode": ["EXP", "ADD", "SUB", "MUL"],
                        "label": ["", "", "", ""],
                        "src": ["k.py:12", "k.py:10", "k.py:12", "other.py:3"]},
                       schema_overrides={"func_hash": pl.UInt64})
    got = sources.leaf_lines(ops, "k.py")
    assert got == {"7": [12, 10], "k_leaf0": [12, 10]}       # other.py's op is left out
    assert sources.links([12, 10], "k.py")["lines"][0] == {"line": 10, "anchor": "src-L10",
                                                           "text": "k.py:10"}
    many = sources.links(list(range(1, 10)), "k.py")
    assert len(many["lines"]) == sources.SHOWN_LINES and many["more"] == 9 - sources.SHOWN_LINES
    tasks = pl.DataFrame({"name": ["0-0-0-0-0(x)", "0-0-1-0-1(x)"], "seq_no": [0, 0],
                          "task_id": [0, 1]})
    topo = pl.DataFrame({"seq_no": [0, 0], "task_id": [0, 1], "leaf_hash": [7, 9]})
    findings = [{"title": "t", "evidence": "slow 0-0-1-0-1(x) and leaf 7", "action": "",
                 "folded": [{"title": "u", "evidence": "function k_leaf0", "action": ""}]}]
    sources.finding_sources(findings, got, "k.py", tasks, topo)
    # task 0-0-1-0-1 runs leaf 9, whose op is in another file: no link for it
    assert [s["ref"] for s in findings[0]["sources"]] == ["leaf 7"]
    assert [s["ref"] for s in findings[0]["folded"][0]["sources"]] == ["k_leaf0"]
    coded, texts = sources.with_codes(tasks, topo, got, "k.py")
    assert texts == ["", "k.py:10, 12"] and coded["code"].to_list() == [1, 0]


def test_config_kernel_report_has_no_source_view(built, tmp_path):
    """A kernel written as a config has no src: no source section, no codes."""
    study = tmp_path / "configs" / "studies" / "plain.yaml"
    study.parent.mkdir(parents=True)
    study.write_text(STUDY.replace("kernels/softmax.py:softmax", "softmax"))
    stage = tmp_path / "results" / "base"
    run_stage(REPO / "configs" / "kernels" / "softmax.yaml", {}, "dav_2201", stage, 1)
    out = tmp_path / "report.html"
    render_study(study, stage.parent, out, REPO / "configs" / "kernels" / "softmax.yaml")
    html = out.read_text()
    assert 'id="kernel-source"' not in html and '"codes"' not in html
    assert 'class="src-link"' not in html and 'class="sl-src"' not in html


def test_stale_source_is_flagged_and_lines_stay_text(built, tmp_path):
    root = tmp_path / "p"
    shutil.copytree(built["root"] / "configs", root / "configs")
    source = root / "configs" / "kernels" / "softmax.py"
    source.write_text(source.read_text() + "# </pre><script>alert(1)</script>\n")
    out = tmp_path / "report.html"
    render_study(root / "configs" / "studies" / "py_softmax.yaml", built["stage"].parent, out,
                 built["kernel"])
    html = out.read_text()
    assert "⚠ This file changed after the kernel was imported" in html
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)" in html


# -- in a browser --------------------------------------------------------------------------
def _browser_module():
    spec = importlib.util.spec_from_file_location("report_browser",
                                                  REPO / "tests" / "test_report_browser.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("report_browser", module)
    spec.loader.exec_module(module)
    return module


def test_clicking_a_task_links_to_its_highlighted_line(built):
    rb = _browser_module()
    if rb.CHROMIUM is None:
        pytest.skip("chromium is not installed")
    profile = Path(tempfile.mkdtemp(prefix="ptolab-chromium-"))
    b = rb.Browser(profile)
    try:
        b.open(built["report"])
        x, y = b.js(rb.FIRST_BAR)
        b.mouse("mouseMoved", x, y)
        time.sleep(0.2)
        assert "source: softmax.py:" in b.js("document.querySelector('.sl-tip').textContent")
        b.mouse("mousePressed", x, y)
        b.mouse("mouseReleased", x, y)
        time.sleep(0.2)
        href = b.js("document.querySelector('.sl-src a').getAttribute('href')")
        b.js("document.querySelector('.sl-src a').click()")
        time.sleep(0.2)
        line = int(href.removeprefix("#src-L"))
        target = b.js("(() => { const t = document.querySelector(':target');"
                      " return [t.id, getComputedStyle(t).backgroundColor]; })()")
        assert target[0] == f"src-L{line}"
        assert target[1] not in ("rgba(0, 0, 0, 0)", "transparent")   # highlighted
        shown = b.js(f"document.getElementById('src-L{line}').textContent")
        assert shown.endswith(built["source"].read_text().splitlines()[line - 1])
        errors, remote = b.problems()
        assert not errors and not remote, (errors, remote)
    finally:
        b.close()
        shutil.rmtree(profile, ignore_errors=True)
