"""The calibration procedure: search, write-back with provenance, clear errors."""
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO
from pipeline.calibrate import Calibration, compass_search, write_back, _get
from simcore.spec.errors import ConfigError
from simcore.spec.hardware import load_hardware


def test_compass_search_finds_a_bounded_minimum():
    target = np.log([3.0, 0.2])
    f = lambda x: float(((x - target) ** 2).sum())
    x, score, evals = compass_search(f, np.zeros(2), np.log([0.01, 0.01]), np.log([10.0, 10.0]),
                                     500)
    assert np.allclose(np.exp(x), [3.0, 0.2], rtol=0.02) and evals <= 500
    # a minimum outside the bounds stops at the bound
    x, _, _ = compass_search(f, np.zeros(2), np.log([0.01, 0.5]), np.log([10.0, 10.0]), 500)
    assert np.isclose(np.exp(x[1]), 0.5)


def test_write_back_keeps_layout_and_names_the_procedure(tmp_path):
    hw = tmp_path / "hw.toml"
    shutil.copy(REPO / "configs/hardware/dav_2201.toml", hw)
    before = hw.read_text().splitlines()
    write_back(hw, {"aicpu.init_us": 12.5, "pipes.mte2.fixed_cycles": 900.0}, "test procedure")
    after = hw.read_text().splitlines()
    assert len(after) == len(before)
    changed = [a for a, b in zip(after, before) if a != b]
    assert len(changed) == 2 and all("# fitted: test procedure" in line for line in changed)
    fitted = load_hardware(hw)
    assert fitted.aicpu.init_us == 12.5 and fitted.pipes.mte2.fixed_cycles == 900.0
    with pytest.raises(ConfigError, match="nonexistent"):
        write_back(hw, {"aicpu.nonexistent": 1.0}, "x")


def test_unknown_parameter_path_is_a_clear_error():
    with pytest.raises(ConfigError, match="aicpu.warp_speed"):
        _get(load_hardware("dav_2201"), "aicpu.warp_speed")
    with pytest.raises(Exception):
        Calibration.model_validate({"study": "s", "hardware": "h", "parameters": [],
                                    "surprise": 1})


def test_calibrate_command_runs_and_writes_back(tmp_path):
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    cal = tmp_path / "cal.yaml"
    cal.write_text("study: glm_attention_stitch\nhardware: dav_2201\nmax_evaluations: 4\n"
                   "parameters:\n  - {path: aicpu.dev_task_sync_us, low: 0.1, high: 50.0}\n")
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "calibrate", str(cal),
                           "--configs", str(tmp_path / "configs")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "stitch_128" in proc.stdout and "documented 803" in proc.stdout
    text = (tmp_path / "configs/hardware/dav_2201.toml").read_text()
    assert "dev_task_sync_us" in text and f"# fitted: ptolab calibrate {cal.as_posix()}" in text
