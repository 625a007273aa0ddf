"""What keeps the knob-edit loop short: commands import only what they use, configs parse with
libyaml, and the workflow does not validate an unchanged study twice as it starts."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.workflow import load_plan
from simcore.spec import loader
from simcore.spec.errors import ConfigError

from conftest import REPO


def test_every_shipped_yaml_config_reads_the_same_with_the_fast_parser():
    files = sorted((REPO / "configs").rglob("*.yaml"))
    assert files
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert loader._yaml(text) == yaml.safe_load(text), path


def test_a_broken_yaml_file_is_reported_by_the_plain_parser(tmp_path):
    bad = tmp_path / "k.yaml"
    bad.write_text("a: b: c\n")
    with pytest.raises(ConfigError, match="line 1, column 5: mapping values are not allowed "
                                          "here"):
        loader.read_mapping(bad)


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\n"
                          "print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, cwd=REPO, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_the_index_and_the_command_line_import_no_table_or_array_library(tmp_path):
    study = REPO / "configs" / "studies" / "multi_stitch.yaml"
    mods = _modules_after(f"from pipeline.report.render import render_index\n"
                          f"from pipeline.cli import build_parser\nbuild_parser()\n"
                          f"render_index({str(tmp_path)!r}, [{str(study)!r}], "
                          f"{str(tmp_path / 'index.html')!r})")
    assert (tmp_path / "index.html").exists()
    assert "polars" not in mods and "numpy" not in mods
    assert "pipeline.report.knobs" not in mods      # its kernel models are not built


def test_a_study_planned_twice_is_validated_again_only_after_an_edit(repo_copy, monkeypatch):
    from pipeline import workflow
    checks = []
    check = workflow._check_stages
    monkeypatch.setattr(workflow, "_check_stages", lambda *a: checks.append(a[0].name)
                        or check(*a))
    config = {"studies": ["multi_stitch"], "results": "results"}
    configs = repo_copy / "configs"
    first = load_plan(configs, config)
    again = load_plan(configs, config)
    assert checks == ["multi_stitch"]
    assert again.studies == first.studies
    # a kernel edit that breaks a stage is found by the next plan
    kernel = configs / "kernels" / "multi_stitch_add.yaml"
    kernel.write_text(kernel.read_text() + "\nbogus: 1\n")
    with pytest.raises(ConfigError):
        load_plan(configs, config)
    assert checks == ["multi_stitch", "multi_stitch"]
