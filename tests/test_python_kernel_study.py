"""A study may name a PyPTO Python kernel directly: the workflow imports it, runs the
stages on the imported config, and re-imports when the source changes."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pipeline.workflow import load_plan
from simcore.spec.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
PY = REPO / "tests" / "kernels_py"

pytestmark = pytest.mark.skipif(shutil.which("snakemake") is None or shutil.which("ptolab") is None,
                                reason="needs the installed ptolab and snakemake commands")

STUDY = """\
name: py_softmax
description: the softmax kernel written in PyPTO's Python API
kernel: kernels/softmax.py:softmax
stages:
  - name: small_tiles
    description: the example's (1, 4, 1, 64) tiles
  - name: whole_rows
    description: tiles that hold whole rows
    set: {tiles.vec0: [1, 32, 1, 256]}
"""


def project(tmp_path: Path, study: str = STUDY) -> Path:
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    shutil.copy(PY / "softmax.py", tmp_path / "configs" / "kernels" / "softmax.py")
    (tmp_path / "configs" / "studies" / "py_softmax.yaml").write_text(study)
    (tmp_path / "configs" / "workflow.yaml").write_text("studies: [py_softmax]\nresults: results\n")
    return tmp_path


def snakemake(work: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work), *args],
                          capture_output=True, text=True, timeout=900)


def test_python_kernel_study_runs_and_reimports_on_edit(tmp_path):
    import yaml
    from pipeline.frontend import kernel_text, trace_file
    tiles = yaml.safe_load(kernel_text(trace_file(PY / "softmax.py", "softmax"), "x"))["tiles"]
    vec = next(iter(tiles))
    work = project(tmp_path, STUDY.replace("tiles.vec0", f"tiles.{vec}"))
    proc = snakemake(work, "-c2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = work / "results" / "py_softmax"
    imported = (results / "kernel.yaml").read_text()
    assert "softmax.py" in imported and "sha256" in imported
    small, whole = (json.loads((results / s / "parsed" / "metrics.json").read_text())
                    for s in ("small_tiles", "whole_rows"))
    # the knob works through the imported config: whole-row tiles make fewer leaf tasks
    assert whole["leaf_tasks"] < small["leaf_tasks"]
    assert (results / "report.html").exists()

    # nothing to do until the source changes; then the import and both stages rerun
    assert "Nothing to be done" in snakemake(work, "-n").stdout + snakemake(work, "-n").stderr
    source = work / "configs" / "kernels" / "softmax.py"
    source.write_text(source.read_text().replace("BS, S, H, D = 32,", "BS, S, H, D = 16,"))
    dry = snakemake(work, "-n")
    rules = [line.split()[1].rstrip(":") for line in (dry.stdout + dry.stderr).splitlines()
             if line.startswith("rule ")]
    assert rules.count("import_kernel") == 1 and rules.count("stage") == 2
    proc = snakemake(work, "-c2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = json.loads((results / "small_tiles" / "parsed" / "metrics.json").read_text())
    assert after["root_calls"] == small["root_calls"] // 2      # 16 batch rows, not 32


def test_a_missing_python_kernel_stops_the_plan(tmp_path):
    work = project(tmp_path, STUDY.replace("kernels/softmax.py", "kernels/nope.py"))
    with pytest.raises(ConfigError, match="nope.py"):
        load_plan(work / "configs", {"studies": ["py_softmax"], "results": "results"})


def test_dims_on_a_config_kernel_are_refused(tmp_path):
    work = project(tmp_path, STUDY.replace("kernel: kernels/softmax.py:softmax",
                                           "kernel: softmax\ndims: {x_0: 4}"))
    with pytest.raises(ConfigError, match="dims"):
        load_plan(work / "configs", {"studies": ["py_softmax"], "results": "results"})
