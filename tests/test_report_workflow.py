"""The index through the real workflow: `snakemake nightly` refreshes results/index.html
without building the other studies, and the index lists studies in the workflow file's
order (not alphabetically), linking only the reports that exist."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.skipif(
    shutil.which("snakemake") is None or shutil.which("ptolab") is None,
    reason="needs the installed ptolab and snakemake commands")


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)


def test_nightly_refreshes_the_index_in_workflow_order(tmp_path):
    work = tmp_path / "p"
    shutil.copytree(REPO / "configs", work / "configs")
    # multi_stitch first although loop_merge sorts before it; only multi_stitch is nightly
    (work / "configs" / "workflow.yaml").write_text(
        "studies: [multi_stitch, loop_merge]\nresults: results\n", encoding="utf-8")
    (work / "configs" / "nightly.yaml").write_text("studies: [multi_stitch]\n",
                                                   encoding="utf-8")
    snake = ["snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work), "-c1"]
    proc = run(snake + ["nightly_stages"], work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run(["ptolab", "baseline", "update"], work).returncode == 0
    proc = run(snake + ["nightly"], work)
    assert proc.returncode == 0, proc.stderr[-3000:]

    index = work / "results" / "index.html"
    html = index.read_text(encoding="utf-8")
    assert re.findall(r'<tr data-study="(\w+)">', html) == ["multi_stitch", "loop_merge"]
    assert 'href="multi_stitch/report.html"' in html           # built by the nightly
    assert 'href="loop_merge/report.html"' not in html          # not built: no dead link
    assert not (work / "results" / "loop_merge").exists()
    assert 'href="nightly/report.html"' in html
    proc = run(snake + ["-n", "nightly"], work)                 # and nothing is left to do
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr
