"""Config files: good ones load, bad ones fail with the file, the field and the fix."""
import subprocess
import sys
import textwrap

import pytest

from simcore.spec.errors import ConfigError
from simcore.spec.hardware import load_hardware
from simcore.spec.kernel import load_kernel
from simcore.spec.study import load_study

from conftest import REPO

MSA_TOML = textwrap.dedent('''
    name = "multi_stitch_add"
    description = "Elementwise x + 1.0 over 128 chunks of 64 FP32 under pypto.loop"
    [params]
    N = 128
    W = 64
    [tensors.x]
    shape = ["N*W"]
    dtype = "fp32"
    role = "input"
    [tensors.y]
    shape = ["N*W"]
    dtype = "fp32"
    role = "output"
    [tiles]
    vec = [64]
    [[body]]
    set_vec_tile_shapes = "vec"
    [[body]]
    loop = {name = "add_loop", idx = "i", trip = "N", style = "pypto"}
    body = [
      {op = "view", inputs = ["x"], out = "xi", shape = ["W"], offsets = ["i*W"]},
      {op = "add", inputs = ["xi"], scalar = 1.0, out = "yi", label = "add_one"},
      {op = "assemble", inputs = ["yi"], out = "y", offsets = ["i*W"]},
    ]
    [options.runtime_options]
    stitch_function_max_num = 64
''')


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_shipped_configs_load():
    for name in ("dav_2201", "dav_3510"):
        hw = load_hardware(name)
        assert hw.cores.aic > 0 and hw.cores.aiv == 2 * hw.cores.aic
    assert load_hardware("dav_3510").buffers.ub > load_hardware("dav_2201").buffers.ub
    for path in (REPO / "configs" / "kernels").iterdir():
        load_kernel(path)
    for path in (REPO / "configs" / "studies").iterdir():
        load_study(path)


def test_toml_and_yaml_share_one_schema(tmp_path, msa_path):
    from_toml = load_kernel(write(tmp_path, "k.toml", MSA_TOML))
    assert from_toml == load_kernel(msa_path)


@pytest.mark.parametrize("text, field, words", [
    ("name: k\ntensors: {x: {shape: [4], dtype: fp33}}\nbody: [{op: exp, inputs: [x], out: y}]\n",
     "tensors.x.dtype", "fp32"),
    ("name: k\ntensors: {x: {shape: [4]}}\nbody: [{op: exp, inputs: [x], out: y, colour: 1}]\n",
     "body[0].colour", "not a known"),
    ("name: k\nbody: [{op: exp, inputs: [x], out: y}]\n", "tensors", "required"),
    ("name: k\ntensors: {x: {shape: [4]}}\nbody: [{op: exp, inputs: [x], out: y}]\n"
     "options: {runtime_options: {stitch_function_max_num: fast}}\n",
     "options.runtime_options.stitch_function_max_num", "integer"),
    ("name: k\ntensors: {x: {shape: ['N*']}}\nbody: [{op: exp, inputs: [x], out: y}]\n",
     "tensors.x.shape", "expression"),
    ("name: k\ntensors: {x: {shape: [4]}}\nbody: [{op: add, inputs: [x], out: y}]\n",
     "body[0]", "2 input"),
])
def test_bad_kernel_names_field_value_and_allowed(tmp_path, text, field, words):
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(ConfigError) as err:
        load_kernel(path)
    message = str(err.value)
    assert str(path) in message
    assert f"'{field}" in message
    assert words in message


@pytest.mark.parametrize("name, text, words", [
    ("bad.toml", 'name = "k"\n[tensors\n', "TOML"),
    ("bad.yaml", "name: k\ntensors: {x: [1, 2\n", "YAML"),
    ("bad.json", "{}", "unsupported"),
])
def test_broken_syntax_is_reported_with_location(tmp_path, name, text, words):
    path = write(tmp_path, name, text)
    with pytest.raises(ConfigError) as err:
        load_kernel(path)
    assert words in str(err.value) and str(path) in str(err.value)


def test_bad_hardware_and_study(tmp_path):
    hw = write(tmp_path, "hw.toml", (REPO / "configs/hardware/dav_2201.toml").read_text()
               .replace("aic = 24", "aic = -24"))
    with pytest.raises(ConfigError, match=r"cores\.aic"):
        load_hardware(hw)
    study = write(tmp_path, "s.yaml", """
        name: s
        kernel: multi_stitch_add
        stages:
          - {name: a, description: first, set: {}}
          - {name: a, description: again, set: {}}
    """)
    with pytest.raises(ConfigError, match="appears twice"):
        load_study(study)
    for taken in ("logs", "report.html", "kernel.yaml"):
        clash = write(tmp_path, "c.yaml", f"""
            name: c
            kernel: multi_stitch_add
            stages:
              - {{name: {taken}, description: a stage named like a file beside it}}
        """)
        with pytest.raises(ConfigError, match=f"stage name '{taken}' is taken") as err:
            load_study(clash)
        assert "stages" in str(err.value) and str(clash) in str(err.value)


def test_cli_reports_bad_config_in_one_paragraph_with_exit_2(tmp_path):
    path = write(tmp_path, "bad.yaml", "name: k\ntensors: {x: {shape: [4], bogus: 1}}\n"
                                       "body: [{op: exp, inputs: [x], out: y}]\n")
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "compile", str(path),
                           "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "tensors.x.bogus" in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "o" / "compile.json").exists()


def test_ready_on_host_tensors_must_name_kernel_tensors(tmp_path):
    path = write(tmp_path, "k.yaml", "name: k\ntensors: {x: {shape: [4], control_flow_input: true}}\n"
                 "body: [{op: exp, inputs: [x], out: y}]\n"
                 "options: {runtime_options: {ready_on_host_tensors: [x, nope]}}\n")
    with pytest.raises(ConfigError, match=r"ready_on_host_tensors names nope.*known: x") as err:
        load_kernel(path)
    assert str(path) in str(err.value)


def test_fresh_per_names_a_pypto_loop_of_a_temporary(tmp_path):
    body = ("body:\n  - loop: {name: L, idx: i, trip: 2, STYLE}\n"
            "    body: [{op: exp, inputs: [x], out: y}, {op: assemble, inputs: [y], out: t, "
            "offsets: [0]}]\n")
    ok = write(tmp_path, "ok.yaml", "name: k\ntensors: {x: {shape: [4]}, t: {shape: [4], "
               "fresh_per: L}}\n" + body.replace(", STYLE", ""))
    assert load_kernel(ok).tensors["t"].fresh_per == "L"
    unknown = write(tmp_path, "u.yaml", ok.read_text().replace("fresh_per: L", "fresh_per: M"))
    with pytest.raises(ConfigError, match=r"tensors.t.fresh_per names 'M'.*known: L"):
        load_kernel(unknown)
    python_for = write(tmp_path, "f.yaml", "name: k\ntensors: {x: {shape: [4]}, t: {shape: "
                       "[4], fresh_per: L}}\n" + body.replace("STYLE", "style: for"))
    with pytest.raises(ConfigError, match=r"not a pypto loop"):
        load_kernel(python_for)
    an_input = write(tmp_path, "i.yaml", ok.read_text().replace(
        "t: {shape: [4], fresh_per: L}", "t: {shape: [4], role: output, fresh_per: L}"))
    with pytest.raises(ConfigError, match=r"only a temporary gets memory per iteration"):
        load_kernel(an_input)


def test_bad_override_names_the_option(msa_path, tmp_path):
    from pipeline.runner import run_simulate
    with pytest.raises(ConfigError, match="stitch_function_max_num.*1024"):
        run_simulate(msa_path, {"runtime_options.stitch_function_max_num": 5000}, "dav_2201",
                     tmp_path)
    with pytest.raises(ConfigError, match="not known"):
        run_simulate(msa_path, {"runtime.stitch": 1}, "dav_2201", tmp_path)
    # a study's set: written as a nested table rather than dotted keys
    with pytest.raises(ConfigError, match=r"dotted keys.*runtime_options\.stitch_function_max_num"):
        run_simulate(msa_path, {"runtime_options": {"stitch_function_max_num": 4}}, "dav_2201",
                     tmp_path)
    assert not (tmp_path / "metrics.json").exists()


def test_a_study_may_store_a_declared_tensor_in_nz_or_bypass_l2(msa_path):
    """tensors.<name>.format / .cache_policy: the performance guide's NZ weights and
    set_cache_policy as --set keys and study settings; other fields and unknown tensors stop
    with the key, the tensor and what may be changed."""
    from pipeline.runner import resolve_kernel
    from simcore.compiler import compile_kernel
    mm = REPO / "configs" / "kernels" / "skinny_matmul.yaml"
    nd = resolve_kernel(mm, {})
    nz = resolve_kernel(mm, {"tensors.b.format": "NZ", "tensors.a.cache_policy": "bypass"})
    assert (nd.tensors["b"].format, nz.tensors["b"].format) == ("ND", "NZ")
    assert nz.tensors["a"].cache_policy == "bypass"
    # NZ stores B's fractals contiguously: the copies into L1 take fewer, longer bursts
    hw = load_hardware("dav_2201")
    assert compile_kernel(nz, hw).work.mte2_bursts.sum() < compile_kernel(nd, hw).work.mte2_bursts.sum()
    for key, words in (("tensors.w.format", "does not declare"),
                       ("tensors.b.shape", "format or cache_policy"),
                       ("tensors.b.format", "NZ")):
        with pytest.raises(ConfigError, match=words):
            resolve_kernel(mm, {key: "XY" if key.endswith("format") else [1]})
