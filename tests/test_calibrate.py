"""The calibration procedure: search, write-back with provenance, clear errors."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO
from pipeline.calibrate import (Calibration, Fit, _get, compass_search, load_calibration,
                                write_fit)
from simcore.spec.errors import ConfigError
from simcore.spec.hardware import Hardware, dotted_values, load_hardware
from simcore.spec.loader import load, read_mapping


def test_compass_search_finds_a_bounded_minimum():
    target = np.log([3.0, 0.2])
    f = lambda x: float(((x - target) ** 2).sum())
    x, score, evals = compass_search(f, np.zeros(2), np.log([0.01, 0.01]), np.log([10.0, 10.0]),
                                     500)
    assert np.allclose(np.exp(x), [3.0, 0.2], rtol=0.02) and evals <= 500
    # a minimum outside the bounds stops at the bound
    x, _, _ = compass_search(f, np.zeros(2), np.log([0.01, 0.5]), np.log([10.0, 10.0]), 500)
    assert np.isclose(np.exp(x[1]), 0.5)


def _facts_only(tmp_path, name="dav_2201"):
    hw = tmp_path / f"{name}.toml"
    shutil.copy(REPO / f"configs/hardware/{name}.toml", hw)
    return hw


def _flat(hw):
    return dict(dotted_values(hw.model_dump()))


def test_the_fit_overlay_replaces_exactly_its_keys():
    facts = _flat(load(Hardware, REPO / "configs/hardware/dav_2201.toml", "hardware"))
    merged = _flat(load_hardware("dav_2201"))
    fitted = dict(dotted_values(read_mapping(REPO / "configs/hardware/dav_2201.fit.toml")))
    changed = {k for k in facts if facts[k] != merged[k]}
    assert fitted and changed <= set(fitted)
    assert all(merged[k] == v for k, v in fitted.items())
    # every fitted key is one the calibration procedure fits
    procedure = load_calibration(REPO / "configs/calibration/glm_stitch.yaml")
    assert set(fitted) == {p.path for p in procedure.parameters}


def test_an_overlay_key_the_facts_lack_is_an_error(tmp_path):
    hw = _facts_only(tmp_path)
    (tmp_path / "dav_2201.fit.toml").write_text("[aicpu]\ndispatch_us = 0.3\nwarp_us = 1.0\n")
    with pytest.raises(ConfigError) as err:
        load_hardware(hw)
    assert "dav_2201.fit.toml" in str(err.value) and "aicpu.warp_us" in str(err.value)
    # a fitted value is validated with the facts, as one Hardware
    (tmp_path / "dav_2201.fit.toml").write_text("[aicpu]\ndispatch_us = -1.0\n")
    with pytest.raises(ConfigError, match="aicpu.dispatch_us"):
        load_hardware(hw)
    with pytest.raises(ConfigError, match="facts file"):
        load_hardware(tmp_path / "dav_2201.fit.toml")


def test_write_fit_writes_only_the_overlay_deterministically(tmp_path):
    hw = _facts_only(tmp_path)
    facts_before = hw.read_bytes()
    cal = Calibration.model_validate({"study": "s", "hardware": "dav_2201", "parameters": [
        {"path": "aicpu.dispatch_us", "low": 0.1, "high": 1.0},
        {"path": "pipes.mte2.fixed_cycles", "low": 600.0, "high": 4000.0}]})
    table = [{"stage": "a", "kernel_us": 110.0, "documented_kernel_us": 100.0,
              "e2e_us": 190.0, "documented_e2e_us": 200.0}]
    fit = Fit({"pipes.mte2.fixed_cycles": 900.0, "aicpu.dispatch_us": 0.25}, 0.0123, 7, table)
    overlay = write_fit(hw, fit.values, "cal.yaml", cal, fit, date="2026-01-02")
    first = overlay.read_bytes()
    write_fit(hw, fit.values, "cal.yaml", cal, fit, date="2026-01-02")
    assert overlay.read_bytes() == first and hw.read_bytes() == facts_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dav_2201.fit.toml", "dav_2201.toml"]
    text = first.decode()
    header = [line for line in text.splitlines() if line.startswith("#")]
    for fact in ("cal.yaml", "2026-01-02", "0.0123", "study s", "documented 100"):
        assert any(fact in line for line in header), fact
    # values follow the facts file's order of tables ([pipes.mte2] before [aicpu])
    assert text.index("[pipes.mte2]") < text.index("[aicpu]")
    fitted = load_hardware(hw)
    assert fitted.pipes.mte2.fixed_cycles == 900.0 and fitted.aicpu.dispatch_us == 0.25
    with pytest.raises(ConfigError, match="aicpu.nonexistent"):
        write_fit(hw, {"aicpu.nonexistent": 1.0}, "cal.yaml", cal, fit, date="2026-01-02")


def test_unknown_parameter_path_is_a_clear_error():
    with pytest.raises(ConfigError, match="aicpu.warp_speed"):
        _get(load_hardware("dav_2201"), "aicpu.warp_speed")
    with pytest.raises(Exception):
        Calibration.model_validate({"study": "s", "hardware": "h", "parameters": [],
                                    "surprise": 1})


def test_calibrate_command_writes_the_overlay_not_the_facts(tmp_path):
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    facts = tmp_path / "configs/hardware/dav_2201.toml"
    facts_before = facts.read_bytes()
    cal = tmp_path / "cal.yaml"
    cal.write_text("study: glm_attention_stitch\nhardware: dav_2201\nmax_evaluations: 4\n"
                   "parameters:\n  - {path: aicpu.dev_task_sync_us, low: 0.1, high: 50.0}\n")
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "calibrate", str(cal),
                           "--configs", str(tmp_path / "configs")],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "SOURCE_DATE_EPOCH": "1700000000"})
    assert proc.returncode == 0, proc.stderr
    assert "stitch_128" in proc.stdout and "documented 803" in proc.stdout
    assert facts.read_bytes() == facts_before
    overlay = read_mapping(tmp_path / "configs/hardware/dav_2201.fit.toml")
    assert list(dotted_values(overlay))[0][0] == "aicpu.dev_task_sync_us"
    text = (tmp_path / "configs/hardware/dav_2201.fit.toml").read_text()
    assert f"# command: ptolab calibrate {cal.as_posix()}" in text and "2023-11-14" in text
