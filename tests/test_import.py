"""ptolab import: PyPTO Python kernels traced into kernel configs.

The kernels under tests/kernels_py are our own, written in PyPTO's Python API; each must
import to a config whose compile gives the counts of the hand-written config it mirrors.
"""
from __future__ import annotations

import hashlib
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from conftest import PY_KERNEL_ARGS

from pipeline.cli import main
from pipeline.frontend import kernel_text, trace_file
from simcore.compiler import compile_kernel
from simcore.spec.errors import ConfigError
from simcore.spec.hardware import load_hardware
from simcore.spec.kernel import Kernel

REPO = Path(__file__).resolve().parents[1]
PY = REPO / "tests" / "kernels_py"
COUNTS = ("root_calls", "loop_bodies", "leaf_functions", "leaf_tasks", "dev_tasks")
ARGS = PY_KERNEL_ARGS


@pytest.fixture(scope="module")
def hw():
    return load_hardware("dav_2201")


def imported(path: Path, function=None, dims=None, args=None) -> tuple[Kernel, str]:
    text = kernel_text(trace_file(path, function, dims, args), "test")
    return Kernel.model_validate(yaml.safe_load(text)), text


def write(tmp_path: Path, body: str, name="k.py") -> Path:
    path = tmp_path / name
    path.write_text("import pypto\n" + textwrap.dedent(body))
    return path


def test_a_compile_error_names_the_python_line(tmp_path, hw):
    """An imported kernel's op that the compiler refuses is named by its field path and
    by the line of the Python file that wrote it."""
    path = write(tmp_path, """
        @pypto.frontend.jit()
        def k(x: pypto.Tensor([16, 64], pypto.DT_FP32), y: pypto.Tensor([16, 64], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(8, 4)
            y[:] = x + 1.0
        """)
    kernel, _ = imported(path)
    with pytest.raises(ConfigError, match=r"at k\.py:6'.*tail axis"):
        compile_kernel(kernel, hw)


@pytest.mark.parametrize("name", ["multi_stitch_add", "softmax", "rmsnorm", "tiling_bmm",
                                  "glm_attention", "gdr_inverse", "gdr_inverse_block"])
def test_python_kernel_compiles_like_its_config(name, hw):
    kernel, _ = imported(PY / f"{name}.py", args=ARGS.get(name))
    from simcore.spec.kernel import load_kernel
    want = compile_kernel(load_kernel(REPO / "configs" / "kernels" / f"{name}.yaml"), hw).counts()
    got = compile_kernel(kernel, hw).counts()
    assert {k: got[k] for k in COUNTS} == {k: want[k] for k in COUNTS}


@pytest.mark.parametrize("name, stitches", [("multi_stitch_add", (1, 64)), ("softmax", (None,)),
                                             ("rmsnorm", (None,)), ("tiling_bmm", (None,)),
                                             ("glm_attention", (1, 128, 512)),
                                             ("gdr_inverse", (None,)),
                                             ("gdr_inverse_block", (None,))])
def test_python_kernel_simulates_like_its_config(name, stitches, hw, tmp_path):
    """The imported kernel is the same kernel: per stitch setting, the same dev tasks and the
    same simulated kernel and end-to-end times as the hand-written config, with per-copy
    setups or without.  glm_attention's config gathers a V tile's four paged blocks, its
    Python form reads one view of consecutive blocks (tests/kernels_py/glm_attention.py):
    either way V comes into L1 one kL0 piece of 128 rows per copy."""
    from pipeline.runner import resolve_kernel
    from simcore.machine import simulate
    _, text = imported(PY / f"{name}.py", args=ARGS.get(name))
    (tmp_path / "imported.yaml").write_text(text)
    paths = (REPO / "configs" / "kernels" / f"{name}.yaml", tmp_path / "imported.yaml")
    mte2 = hw.pipes.mte2.model_copy(update={"aiv_copy_cycles": 0.0, "aic_copy_cycles": 0.0})
    no_setups = hw.model_copy(update={"pipes": hw.pipes.model_copy(update={"mte2": mte2})})
    for stitch in stitches:
        sets = {} if stitch is None else {"runtime_options.stitch_function_max_num": stitch}
        figures, bare, loads = [], [], []
        for k in (resolve_kernel(path, sets) for path in paths):
            program = compile_kernel(k, hw)
            tl = simulate(hw, program, k.options.runtime_options)
            figures.append((program.counts()["dev_tasks"], tl.kernel_us, tl.e2e_us))
            tl = simulate(no_setups, program, k.options.runtime_options)
            bare.append((tl.kernel_us, tl.e2e_us))
            loads.append(program.work.mte2_loads)
        assert figures[0][0] == figures[1][0], (stitch, figures)
        assert bare[0] == pytest.approx(bare[1], rel=1e-9), (stitch, bare)
        assert (loads[0] == loads[1]).all()
        assert figures[0][1:] == pytest.approx(figures[1][1:], rel=1e-9), (stitch, figures)


def test_glm_branches_share_names_under_exclusive_conditions():
    kernel, _ = imported(PY / "glm_attention.py", args=ARGS["glm_attention"])
    assert kernel.body[0].set_operation_options.combine_axis      # the kernel's first call
    loop_b = kernel.body[1]
    ops = [s for s in loop_b.body[0].body if getattr(s, "op", None)]
    p = [o for o in ops if o.out == "p"]
    assert len(p) == 2 and {o.cond for o in p} == {"s2 == 0", "not (s2 == 0)"}
    # max_update[:] = ... in either branch: the running max is renamed, not stored
    renames = [o for o in ops if o.op == "rename" and o.out == "max_update"]
    assert {o.cond for o in renames} == {"s2 == 0", "not (s2 == 0)"}
    assert not [o for o in ops if o.op == "assemble" and o.out == "max_update"]
    assert kernel.options.pass_options.cube_l1_reuse_setting == {"0": 4}
    assert loop_b.body[0].loop.unroll_list == [8, 4, 2, 1]


def test_header_names_source_and_hash_and_output_is_deterministic():
    path = PY / "softmax.py"
    text1 = kernel_text(trace_file(path), "cmd")
    text2 = kernel_text(trace_file(path), "cmd")
    assert text1 == text2
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest in text1.splitlines()[0] and path.as_posix() in text1.splitlines()[0]
    assert "# softmax.py:" in text1        # every statement points at its source line


def test_standins_leave_sys_modules_as_they_were():
    before = {k for k in sys.modules if k.split(".")[0] in ("pypto", "torch")}
    trace_file(PY / "rmsnorm.py")
    assert {k for k in sys.modules if k.split(".")[0] in ("pypto", "torch")} == before


@pytest.mark.skipif("torch" in sys.modules, reason="torch is installed")
def test_module_level_torch_works_without_torch(tmp_path):
    path = write(tmp_path, """
        import torch
        from torch import nn
        DT = torch.float16

        @pypto.jit
        def k(x: pypto.Tensor([64, 64], pypto.DT_FP16), y: pypto.Tensor([64, 64], pypto.DT_FP16)):
            pypto.set_vec_tile_shapes(32, 32)
            y[:] = x * 2.0
        """)
    kernel, _ = imported(path)
    assert kernel.tensors["y"].role == "output"


def test_real_pypto_is_not_shadowed(tmp_path, monkeypatch):
    (tmp_path / "site" / "pypto").mkdir(parents=True)
    (tmp_path / "site" / "pypto" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(ConfigError, match="real PyPTO"):
        trace_file(PY / "rmsnorm.py")


def test_dynamic_dims_become_params(tmp_path, hw):
    path = write(tmp_path, """
        @pypto.frontend.jit
        def k(x: pypto.Tensor([pypto.DYNAMIC, 64], pypto.DT_FP32),
              y: pypto.Tensor([pypto.DYNAMIC, 64], pypto.DT_FP32), block: int):
            pypto.set_vec_tile_shapes(16, 64)
            for i in pypto.loop(pypto.ceildiv(x.shape[0], block)):
                y[i * block:(i + 1) * block, :] = pypto.view(x, [block, 64], [i * block, 0]) + 1.0
        """)
    kernel, text = imported(path, dims={"x_0": 256, "y_0": 256}, args={"block": 32})
    assert kernel.params == {"x_0": 256, "y_0": 256}
    assert compile_kernel(kernel, hw).root_calls == 8
    bigger = Kernel.model_validate({**yaml.safe_load(text), "params": {"x_0": 512, "y_0": 512}})
    assert compile_kernel(bigger, hw).root_calls == 16   # the trip count stayed symbolic


def test_caller_shapes_come_from_arg(tmp_path, hw):
    path = write(tmp_path, """
        @pypto.frontend.jit
        def k(a: pypto.Tensor[[...], pypto.DT_FP16], out: pypto.Tensor[[...], pypto.DT_FP16]):
            pypto.set_vec_tile_shapes(32, 32)
            out[:] = (a + a) * 2.0
        """)
    with pytest.raises(ConfigError, match="--arg a="):
        trace_file(path)
    kernel, _ = imported(path, args={"a": [64, 64], "out": [64, 64]})
    assert kernel.tensors["a"].shape == [64, 64] and kernel.tensors["a"].dtype == "fp16"
    assert compile_kernel(kernel, hw).leaf_tasks == 4


def test_loop_start_step_and_loop_unroll(tmp_path, hw):
    path = write(tmp_path, """
        @pypto.frontend.jit
        def k(x: pypto.Tensor([13 * 32], pypto.DT_FP32), y: pypto.Tensor([13 * 32], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(32)
            for i in pypto.loop(2, 10, 2):
                y[i * 32:(i + 1) * 32] = pypto.view(x, [32], [i * 32]) + 1.0
            for j, n in pypto.loop_unroll(0, 13, 1, unroll_list=[4], name="u"):
                y[j * 32:(j + n) * 32] = pypto.view(x, [n * 32], [j * 32]) * 2.0
        """)
    kernel, _ = imported(path)
    program = compile_kernel(kernel, hw)
    # 4 iterations of the stepped loop, then 3 chunks of 4 and 1 chunk of 1
    assert program.root_calls == 4 + 3 + 1
    assert program.leaf_tasks == 4 + 13


UNSUPPORTED = {
    "no broadcast": ("y[:] = x * pypto.view(x, [32], [0, 0])", "neither match nor broadcast"),
    "element read": ("n = x[0, 0]", "element reads"),
    "unknown op": ("y[:] = pypto.log1p(x)", "log1p"),
    "assemble into on-chip": ("t = x + 1.0\n            t[0:32, :] = x[0:32, :] * 2.0",
                              "on-chip"),
    "reinterpreting view": ("y[:] = pypto.view(x + 1.0, [64, 64], [0, 0], dtype=pypto.DT_FP16)",
                            "dtype="),
    "inplace reshape of a GM view": ("y[:] = pypto.reshape(x[0:32, :], [64, 32], "
                                     "inplace=True) * 1.0", "inplace reshape of a view"),
    "partial on-chip reshape": ("r = pypto.reshape(x + 1.0, [32, 128], valid_shape=[32, 64])",
                                "valid_shape smaller"),
    "scalar minus tensor": ("y[:] = 1.0 - x", "-(x - c)"),
    "scalar over tensor": ("y[:] = 1.0 / x", "pypto.reciprocal"),
    "5-D matmul": ("z = pypto.matmul(pypto.reshape(x, [1, 1, 1, 64, 64], inplace=True), x, "
                   "pypto.DT_FP32)", "2 to 4 dims"),
}


@pytest.mark.parametrize("case", sorted(UNSUPPORTED))
def test_unsupported_constructs_stop_with_where_and_what_is_supported(tmp_path, case):
    line, words = UNSUPPORTED[case]
    path = write(tmp_path, f"""
        @pypto.jit
        def kern(x: pypto.Tensor([64, 64], pypto.DT_FP32), y: pypto.Tensor([64, 64], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(32, 32)
            pypto.set_cube_tile_shapes([32, 32], [32, 32], [32, 32])
            {line}
        """)
    with pytest.raises(ConfigError) as err:
        trace_file(path)
    message = str(err.value)
    assert words in message
    line = 7 + line.count("\n")                 # the statement that is refused
    assert "kern()" in message and f"k.py:{line}" in message and "Supported:" in message


def test_symbolic_if_around_a_loop_and_one_branch_value_are_refused(tmp_path):
    path = write(tmp_path, """
        @pypto.jit
        def kern(x: pypto.Tensor([64], pypto.DT_FP32), y: pypto.Tensor([64], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(64)
            for i in pypto.loop(4):
                if pypto.is_loop_begin(i):
                    t = x + 1.0
                y[:] = t
        """)
    with pytest.raises(ConfigError, match="exists only where i == 0"):
        trace_file(path)


def test_cli_writes_the_config_and_refuses_with_exit_2(tmp_path, capsys):
    out = tmp_path / "sm.yaml"
    assert main(["import", f"{PY / 'softmax.py'}:softmax", "--out", str(out)]) == 0
    assert Kernel.model_validate(yaml.safe_load(out.read_text())).name == "softmax"
    bad = write(tmp_path, """
        @pypto.jit
        def kern(x: pypto.Tensor([64], pypto.DT_FP32), y: pypto.Tensor([64], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(64)
            y[:] = pypto.log1p(x)
        """, "bad.py")
    assert main(["import", str(bad), "--out", str(tmp_path / "bad.yaml")]) == 2
    err = capsys.readouterr().err
    assert "log1p" in err and "Traceback" not in err and not (tmp_path / "bad.yaml").exists()


def test_composites_trace_into_primitive_ops(tmp_path, hw):
    path = write(tmp_path, """
        @pypto.jit
        def kern(x: pypto.Tensor([64, 64], pypto.DT_FP16), y: pypto.Tensor([64, 64], pypto.DT_FP16),
                 z: pypto.Tensor([64, 64], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(32, 64)
            y[:] = pypto.softmax(x, -1)
            z[:] = pypto.sigmoid(pypto.cast(x, pypto.DT_FP32))
        """)
    kernel, _ = imported(path)
    ops = [s.op for s in kernel.body if getattr(s, "op", None)]
    assert ops[:8] == ["cast", "amax", "sub", "exp", "sum", "div", "cast", "assemble"]
    assert ops[8:] == ["cast", "mul", "exp", "add", "full", "div", "assemble"]
    assert compile_kernel(kernel, hw).root_calls == 1


def test_python_min_of_loop_offsets_stays_symbolic(tmp_path):
    path = write(tmp_path, """
        @pypto.frontend.jit
        def kern(x: pypto.Tensor([100, 64], pypto.DT_FP32), y: pypto.Tensor([100, 64], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(32, 64)
            for i in pypto.loop(4):
                end = min((i + 1) * 32, 100)
                t = pypto.view(x, [32, 64], [i * 32, 0], valid_shape=[end - i * 32, 64])
                y[i * 32:(i + 1) * 32, :] = t * 2.0
        """)
    kernel, text = imported(path)
    assert "min((i + 1)*32, 100)" in text


def test_a_python_error_in_the_kernel_names_its_line(tmp_path):
    path = write(tmp_path, """
        @pypto.jit
        def kern(x: pypto.Tensor([64], pypto.DT_FP32), cfg):
            pypto.set_vec_tile_shapes(64)
            t = pypto.cast(x * cfg.scale, cfg.dtype)
        """)
    with pytest.raises(ConfigError, match=r"kern\(\) at .*k.py:6: the kernel raised AttributeError"):
        trace_file(path, args={"cfg": {"eps": 1e-6}})
    kernel, _ = imported(path, args={"cfg": {"scale": 0.5, "dtype": "pypto.DT_BF16"}})
    assert kernel.body[1].scalar == 0.5 and kernel.body[2].dtype == "bf16"   # cfg.x from JSON


def test_gm_views_made_before_a_loop_are_declared_where_used(tmp_path, hw):
    path = write(tmp_path, """
        @pypto.frontend.jit
        def kern(x: pypto.Tensor([4, 16, 64], pypto.DT_FP32), y: pypto.Tensor([64, 64], pypto.DT_FP32)):
            x2 = pypto.reshape(x, [64, 64], inplace=True)
            head = x2[0:16, :]
            pypto.set_vec_tile_shapes(16, 64)
            for i in pypto.loop(4):
                y[i * 16:(i + 1) * 16, :] = pypto.view(x2, [16, 64], [i * 16, 0]) + head
        """)
    kernel, text = imported(path)
    loop_ops = [s.op for s in kernel.body[-1].body]
    assert loop_ops == ["reshape", "view", "view", "add", "assemble"]
    assert compile_kernel(kernel, hw).root_calls == 4


def test_an_on_chip_value_used_across_a_loop_goes_through_a_gm_workspace(tmp_path, hw):
    """Upstream spills an on-chip value another root function reads to a workspace: the
    import writes it into a kernel temporary right after its producer (in the producer's
    root function) and the loop reads a view of that, so the loop's tasks wait for it."""
    path = write(tmp_path, """
        @pypto.frontend.jit
        def kern(x: pypto.Tensor([64, 64], pypto.DT_FP32), y: pypto.Tensor([64, 64], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(16, 64)
            t = x[0:16, :] * 2.0
            for i in pypto.loop(4):
                y[i * 16:(i + 1) * 16, :] = pypto.view(x, [16, 64], [i * 16, 0]) + t
        """)
    kernel, text = imported(path)
    assert kernel.tensors["t_ws"].role == "temporary" and kernel.tensors["t_ws"].shape == [16, 64]
    assert "goes through the GM workspace tensor 't_ws'" in text
    top = [s.op for s in kernel.body if hasattr(s, "op")]
    assert top == ["view", "mul", "assemble"]          # the producer, then its spill
    loop = next(s for s in kernel.body if hasattr(s, "loop"))
    reads = [s for s in loop.body if getattr(s, "op", None) == "view"]
    assert [r.inputs for r in reads] == [["x"], ["t_ws"]]
    program = compile_kernel(kernel, hw)
    assert program.counts()["root_calls"] == 5
    # every task of the loop's four calls waits for the spilled value's writer
    assert set(program.edge_src.tolist()) == {0} and program.edge_dst.size == 4


def test_nz_format_cache_policy_and_host_options(tmp_path):
    path = write(tmp_path, """
        @pypto.frontend.jit(host_options={"compile_monitor_enable": 0},
                            runtime_options={"ready_on_host_tensors": ["w"]})
        def kern(a: pypto.Tensor([64, 64], pypto.DT_BF16),
                 w: pypto.Tensor([64, 64], pypto.DT_BF16, format=pypto.TileOpFormat.TILEOP_NZ),
                 c: pypto.Tensor([64, 64], pypto.DT_FP32)):
            a.set_cache_policy(pypto.CachePolicy.NONE_CACHEABLE, True)
            pypto.set_cube_tile_shapes([64, 64], [64, 64], [64, 64])
            c[:] = a @ w
        """)
    kernel, text = imported(path)
    assert kernel.tensors["w"].format == "NZ" and kernel.tensors["a"].cache_policy == "bypass"
    assert kernel.options.runtime_options.ready_on_host_tensors == ["w"]
    assert "host_options" in text and "not modeled" in text     # said, not silently dropped


def test_and_or_of_loop_conditions_build_one_condition(tmp_path, hw):
    path = write(tmp_path, """
        @pypto.frontend.jit
        def kern(x: pypto.Tensor([4 * 32], pypto.DT_FP32), y: pypto.Tensor([4 * 32], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(32)
            for i in pypto.loop(4):
                xi = pypto.view(x, [32], [i * 32])
                if pypto.is_loop_begin(i) or (i == 3 and True):
                    yi = xi * 2.0
                else:
                    yi = xi + 1.0
                y[i * 32:(i + 1) * 32] = yi
        """)
    kernel, _ = imported(path)
    ops = [s for s in kernel.body[-1].body if getattr(s, "op", None) in ("mul", "add")]
    # `and True` leaves the condition as it is
    assert [o.cond for o in ops] == ["(i == 0) or (i == 3)", "not ((i == 0) or (i == 3))"]
    assert compile_kernel(kernel, hw).leaf_tasks == 4


def test_keepdim_false_and_rank_broadcast_trace_as_upstream_shapes(tmp_path, hw):
    # upstream's reductions drop the axis by default: sum over rows of [64, 128] is [128],
    # and x - s broadcasts it over the rows as numpy does
    path = write(tmp_path, """
        @pypto.frontend.jit
        def k(x: pypto.Tensor([64, 128], pypto.DT_FP32), b: pypto.Tensor([128], pypto.DT_FP32),
              y: pypto.Tensor([64, 128], pypto.DT_FP32), r: pypto.Tensor([64], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(16, 128)
            s = pypto.sum(x, 0)
            assert s.shape == [128]
            y[:] = (x - s) * b
            m = x.amax(-1)
            assert m.shape == [64]
            r[:] = m * 2.0
        """)
    kernel, text = imported(path)
    ops = {s.out: s for s in kernel.body if getattr(s, "op", None)}
    assert ops["s"].keepdim is False and ops["m"].keepdim is False
    program = compile_kernel(kernel, hw)
    # the row max [64] is cut by the tile's first dim, 16: it chains with its muls
    assert any(program.leaf_functions[i].ops[-2:] == ("amax", "mul")
               for i in program.task_leaf)


def test_batched_matmul_and_int64_trace(tmp_path, hw):
    path = write(tmp_path, """
        @pypto.frontend.jit
        def k(a: pypto.Tensor([4, 64, 32], pypto.DT_FP16), b: pypto.Tensor([32, 128], pypto.DT_FP16),
              bt: pypto.Tensor([4, 128, 32], pypto.DT_FP16),
              c: pypto.Tensor([4, 64, 128], pypto.DT_FP32), d: pypto.Tensor([4, 64, 128], pypto.DT_FP16),
              i: pypto.Tensor([64, 64], pypto.DT_INT64), o: pypto.Tensor([64, 64], pypto.DT_INT64)):
            pypto.set_cube_tile_shapes([64, 64], [32, 32], [128, 128])
            c[:] = pypto.matmul(a, b, pypto.DT_FP32)
            p = pypto.matmul(a, bt, pypto.DT_FP16, b_trans=True)
            assert p.shape == [4, 64, 128]
            d[:] = p
            pypto.set_vec_tile_shapes(16, 64)
            o[:] = i + 1
        """)
    kernel, _ = imported(path)
    assert kernel.tensors["i"].dtype == "int64"
    program = compile_kernel(kernel, hw)
    assert program.work.cube.fractals.sum() == 2 * 4 * 64      # two matmuls, 4 batches each
    assert program.leaf_tasks == 4 + 4 + 4


PAGED = """
    @pypto.frontend.jit
    def k(kv: pypto.Tensor([128, 64], pypto.DT_FP32), y: pypto.Tensor([192, 64], pypto.DT_FP32),
          seq_lens: pypto.Tensor([3], pypto.DT_INT64),
          block_table: pypto.Tensor([3, 4], pypto.DT_INT32)):
        pypto.set_vec_tile_shapes(16, 64)
        for b in pypto.loop(3):
            blocks = seq_lens[b].min(4)
            for i in pypto.loop(blocks):
                blk = pypto.view(kv, [16, 64], [block_table[b, i] * 16, 0])
                y[(b * 4 + i) * 16:(b * 4 + i + 1) * 16, :] = pypto.exp(blk)
        first = seq_lens[0]
        assert first == 1                 # a read at a known index has its value
        for j in pypto.loop(first):
            y[j * 16:(j + 1) * 16, :] = pypto.view(kv, [16, 64], [0, 0]) * 2.0
"""


def test_element_reads_become_scalars_from_given_values(tmp_path, hw):
    path = write(tmp_path, PAGED)
    with pytest.raises(ConfigError, match="--arg seq_lens.values="):
        trace_file(path)
    table = [[7, 0, 0, 0], [5, 6, 0, 0], [1, 2, 3, 4]]
    kernel, text = imported(path, args={"seq_lens.values": [1, 2, 9],
                                        "block_table": {"values": table}})
    assert kernel.values == {"seq_lens": [1, 2, 9], "block_table": table}
    assert kernel.tensors["seq_lens"].control_flow_input
    assert kernel.tensors["block_table"].control_flow_input
    assert "min(seq_lens[b], 4)" in text and "block_table[b, i])*16" in text
    # trips min(1, 4), min(2, 4), min(9, 4), then seq_lens[0] = 1
    assert compile_kernel(kernel, hw).root_calls == 1 + 2 + 4 + 1
    # a study changes the data: --set values.seq_lens=[...]
    from simcore.spec.overrides import apply
    data = apply(yaml.safe_load(text), {"values.seq_lens": [4, 4, 4]})
    assert compile_kernel(Kernel.model_validate(data), hw).root_calls == 12 + 4
    with pytest.raises(ConfigError, match="values"):
        apply(yaml.safe_load(text), {"values.kv": [1]})


def test_activations_trace_to_priced_ops(tmp_path, hw):
    path = write(tmp_path, """
        @pypto.frontend.jit
        def k(x: pypto.Tensor([64, 64], pypto.DT_FP32), y: pypto.Tensor([64, 64], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(32, 64)
            y[:] = pypto.tanh(pypto.log(pypto.relu(x) + 1.0)) * x.rsqrt().relu()
        """)
    kernel, _ = imported(path)
    ops = [s.op for s in kernel.body if getattr(s, "op", None)]
    assert ops[:3] == ["relu", "add", "log"] and "tanh" not in ops
    # tanh from exp and a divide
    assert {"exp", "div", "full"} <= set(ops) and ops.count("relu") == 2
    assert compile_kernel(kernel, hw).leaf_tasks >= 2


def test_upstream_elementwise_surface_traces_to_priced_ops(tmp_path, hw):
    path = write(tmp_path, """
        @pypto.frontend.jit
        def k(x: pypto.Tensor([64, 64], pypto.DT_FP32), lo: pypto.Tensor([64], pypto.DT_FP32),
              y: pypto.Tensor([64, 64], pypto.DT_FP32), z: pypto.Tensor([64, 64], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(32, 64)
            a = pypto.clip(x, 0.0, 6.0)
            b = pypto.clip(x, lo)
            c = pypto.ceil(pypto.pow(a, 2)) + pypto.exp2(b) + pypto.expm1(b) + pypto.pow(a, 0.5)
            y[:] = c.floor()
            z[:] = x                       # GM into GM: a move through UB
        """)
    kernel, _ = imported(path)
    ops = [s.op for s in kernel.body if getattr(s, "op", None)]
    assert ops[:3] == ["maximum", "minimum", "maximum"]
    assert ops.count("cast") == 4 and "move" in ops and "log" in ops
    program = compile_kernel(kernel, hw)
    kinds = set(program.work.vector.kinds)
    assert {"maximums", "minimums", "maximum", "log", "cast"} <= kinds
    assert "copy" not in kinds                      # the move runs no Vector instruction
    assert {"maximums", "minimums"} <= set(hw.pipes.vector)   # each its own rate


def test_gather_by_index_traces_to_an_element_gather(tmp_path, hw):
    path = write(tmp_path, """
        @pypto.frontend.jit
        def k(x: pypto.Tensor([64, 128], pypto.DT_FP32), i: pypto.Tensor([32, 128], pypto.DT_INT32),
              y: pypto.Tensor([32, 128], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(16, 128)
            y[:] = pypto.gather(x, 0, i)
        """)
    kernel, _ = imported(path)
    (op,) = [s for s in kernel.body if getattr(s, "op", None) == "gather_elements"]
    assert op.inputs == ["x", "i"] and op.axis == 0
    assert compile_kernel(kernel, hw).leaf_tasks == 2


def test_scatter_traces_to_an_element_scatter(tmp_path, hw):
    path = write(tmp_path, """
        @pypto.frontend.jit
        def k(x: pypto.Tensor([64, 128], pypto.DT_FP32), i: pypto.Tensor([8, 128], pypto.DT_INT64),
              y: pypto.Tensor([64, 128], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(16, 128)
            y[:] = pypto.scatter(x, 0, i, 0.5)
        """)
    kernel, _ = imported(path)
    (op,) = [s for s in kernel.body if getattr(s, "op", None) == "scatter_elements"]
    assert op.inputs == ["x", "i"] and op.scalar == 0.5
    assert compile_kernel(kernel, hw).leaf_tasks == 4


def test_views_reshapes_and_transposes_of_on_chip_values_trace_and_compile(tmp_path, hw):
    # a slice of exp(x) read in exp's leaf task, a reshape whose tiles are exp's, and a
    # transpose of the result: all traced as ops on the on-chip value
    path = write(tmp_path, """
        @pypto.frontend.jit
        def kern(x: pypto.Tensor([64, 128], pypto.DT_FP32), y: pypto.Tensor([64, 64], pypto.DT_FP32),
                 w: pypto.Tensor([64, 128], pypto.DT_FP32), z: pypto.Tensor([128, 64], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(16, 128)
            e = pypto.exp(x)
            y[:] = e[:, 0:64] * 2.0
            r = pypto.reshape(e, [2, 32, 128])
            pypto.set_vec_tile_shapes(1, 16, 128)
            m = r * 3.0
            pypto.set_vec_tile_shapes(16, 128)
            w[:] = pypto.reshape(m, [64, 128]) + pypto.view(e, [64, 128], [0, 0])
            z[:] = pypto.transpose(e, 0, 1)
        """)
    kernel, text = imported(path)
    ops = [s.op for s in kernel.body if getattr(s, "op", None)]
    assert ops == ["exp", "view", "mul", "assemble", "reshape", "mul", "reshape", "view", "add",
                   "assemble", "transpose", "assemble"]
    assert "k.py:8" in text and "k.py:9" in text          # each op names its source line
    program = compile_kernel(kernel, hw)
    # exp, its slice's mul, the reshaped mul, the add and the transpose (tiled over its
    # input, exp's [16, 128] tiles, as upstream tiles a transpose) share exp's four leaf
    # tasks: nothing goes through a workspace
    assert program.workspace_bytes == 0
    assert program.leaf_tasks == 4
    assert program.work.mte2_bytes.sum() == 64 * 128 * 4        # x, once
    assert program.work.mte3_bytes.sum() == (64 * 64 + 64 * 128 + 128 * 64) * 4   # y, w, z


def test_erfc_traces_as_upstream_casts_it_and_set_matrix_size_is_noted(tmp_path, hw):
    path = write(tmp_path, """
        @pypto.frontend.jit
        def kern(x: pypto.Tensor([64, 64], pypto.DT_FP16), y: pypto.Tensor([64, 64], pypto.DT_FP16)):
            pypto.set_vec_tile_shapes(32, 64)
            pypto.set_matrix_size([64, 64, 64])
            y[:] = pypto.erfc(x)
        """)
    kernel, text = imported(path)
    assert [s.op for s in kernel.body if getattr(s, "op", None)] == ["cast", "erfc", "cast",
                                                                      "assemble"]
    assert "# note: set_matrix_size([64, 64, 64]) at k.py:6" in text
    program = compile_kernel(kernel, hw)
    assert program.leaf_tasks == 2 and program.workspace_bytes == 0


def test_a_reshape_without_inplace_copies_the_tensor(tmp_path, hw):
    """PyPTO's reshape defaults to inplace=False: the output gets an address of its own, so
    the data is copied (a Vector copy the next op reads); inplace=True copies nothing."""
    def program(inplace: str):
        path = write(tmp_path, f"""
            @pypto.frontend.jit
            def kern(x: pypto.Tensor([64, 64], pypto.DT_FP32),
                     y: pypto.Tensor([128, 32], pypto.DT_FP32)):
                pypto.set_vec_tile_shapes(32, 64)
                xr = pypto.reshape(x, [128, 32]{inplace})
                pypto.set_vec_tile_shapes(64, 32)
                y[:] = pypto.exp(xr)
            """)
        kernel, _ = imported(path)
        return kernel, compile_kernel(kernel, hw)
    copied_kernel, copied = program("")
    (reshape,) = [s for s in copied_kernel.body if getattr(s, "op", None) == "reshape"]
    assert reshape.inplace is False
    _, inplace = program(", inplace=True")
    assert "copy" in copied.work.vector.kinds and "copy" not in inplace.work.vector.kinds
    assert copied.work.vector.bytes.sum() - inplace.work.vector.bytes.sum() == 64 * 64 * 4
    # the copy's tile (32 rows of 64) is the exp's (64 rows of 32): one leaf task holds both
    assert copied.leaf_tasks == inplace.leaf_tasks == 2
    # and a view may be reshaped by copying it
    path = write(tmp_path, """
        @pypto.frontend.jit
        def kern(x: pypto.Tensor([64, 64], pypto.DT_FP32), y: pypto.Tensor([64, 32], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(32, 64)
            y[:] = pypto.reshape(x[0:32, :], [64, 32]) * 2.0
        """)
    assert compile_kernel(imported(path)[0], hw).leaf_tasks >= 1


def test_a_loop_unroll_iteration_counts_its_factor_toward_the_stitch(tmp_path, hw):
    """Upstream's backend reads the unroll factor p back from a loop_unroll loop's name
    (``<name>_LoopUnroll<p>``), so an iteration doing p steps' work counts p loop bodies,
    as an unroll_list chunk of p does: the same 64 steps give the same dev tasks either way."""
    def program(loop: str, stitch: int):
        path = write(tmp_path, f"""
            @pypto.frontend.jit(runtime_options={{"stitch_function_max_num": {stitch}}})
            def kern(a: pypto.Tensor([4096, 64], pypto.DT_FP32),
                     b: pypto.Tensor([4096, 64], pypto.DT_FP32)):
                pypto.set_vec_tile_shapes(64, 64)
                {loop}
            """, name=f"k{abs(hash(loop)) % 1000}_{stitch}.py")
        return compile_kernel(imported(path)[0], hw)
    unrolled = ("for i, k in pypto.loop_unroll(64, unroll_list=[16], name='A', idx_name='i'):\n"
                "                    b[i * 64:(i + k) * 64, :] = a[i * 64:(i + k) * 64, :] * 2.0")
    listed = ("for i in pypto.loop(64, name='A', idx_name='i', unroll_list=[16]):\n"
              "                    b[i * 64:(i + 1) * 64, :] = a[i * 64:(i + 1) * 64, :] * 2.0")
    for stitch in (16, 64):
        u, l = program(unrolled, stitch), program(listed, stitch)
        assert u.loop_bodies == l.loop_bodies == 64
        assert u.dev_tasks == l.dev_tasks == 64 // stitch


def test_the_graph_partitioners_bounds_load_and_change_nothing(tmp_path, hw):
    """pg_upper_bound and its kin (upstream's partitioner bounds, in estimated cycles) load
    from a jit or a body, with a note; ptolab has no mechanism for them, so the program is
    the same with or without."""
    def program(options: str, body: str = ""):
        path = write(tmp_path, f"""
            @pypto.frontend.jit(pass_options={{{options}}})
            def kern(x: pypto.Tensor([64, 64], pypto.DT_FP32), y: pypto.Tensor([64, 64], pypto.DT_FP32)):
                pypto.set_vec_tile_shapes(32, 64)
                {body or "pass"}
                y[:] = pypto.exp(x) * 2.0
            """)
        kernel, text = imported(path)
        return kernel, text, compile_kernel(kernel, hw)
    _, _, plain = program("")
    kernel, text, bounded = program('"pg_upper_bound": 1536, "pg_skip_partition": True',
                                    "pypto.set_pass_options(pg_lower_bound=64)")
    assert kernel.options.pass_options.pg_upper_bound == 1536
    assert kernel.options.pass_options.pg_lower_bound == 64
    assert "no mechanism" in text
    assert bounded.leaf_tasks == plain.leaf_tasks
    assert [f.ops for f in bounded.leaf_functions] == [f.ops for f in plain.leaf_functions]


def test_option_setters_in_a_body_hold_kernel_wide(tmp_path):
    """pypto.set_codegen_options / set_debug_options / set_runtime_options in a body become
    the kernel's options (over the jit's), with a note; a second, different value stops."""
    path = write(tmp_path, """
        @pypto.frontend.jit(runtime_options={"stitch_function_max_num": 4})
        def kern(x: pypto.Tensor([64, 64], pypto.DT_FP32), y: pypto.Tensor([64, 64], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(32, 64)
            pypto.set_codegen_options(enable_pmu_trace=True)
            pypto.set_debug_options(runtime_debug_mode=1)
            pypto.set_runtime_options(stitch_function_max_num=8)
            y[:] = x * 2.0
        """)
    kernel, text = imported(path)
    assert kernel.options.codegen_options.enable_pmu_trace is True
    assert kernel.options.debug_options.runtime_debug_mode == 1
    assert kernel.options.runtime_options.stitch_function_max_num == 8
    assert "set_debug_options(runtime_debug_mode=1)" in text
    clash = write(tmp_path, """
        @pypto.frontend.jit
        def kern(x: pypto.Tensor([64, 64], pypto.DT_FP32), y: pypto.Tensor([64, 64], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(32, 64)
            pypto.set_runtime_options(stitch_function_max_num=8)
            pypto.set_runtime_options(stitch_function_max_num=16)
            y[:] = x * 2.0
        """, name="clash.py")
    with pytest.raises(ConfigError, match="one kernel-wide value"):
        trace_file(clash)


def test_upstream_lightning_indexer_forms_import(tmp_path, hw):
    """Three forms of upstream's lightning indexer: a loop_unroll whose stop is read from
    data (its chunks after the first start at a symbolic index); a config object given as
    JSON whose merge setting is keyed by hashOrder ints ({"-1": 16} stays a dict); a
    matmul's extend_params scale and ReLU, which the fixpipe applies on the way out (noted,
    nothing to price beyond the copy-out)."""
    path = write(tmp_path, """
        @pypto.frontend.jit
        def k(x: pypto.Tensor([64, 64], pypto.DT_FP16), w: pypto.Tensor([64, 64], pypto.DT_FP16),
              seq: pypto.Tensor([1], pypto.DT_INT32), y: pypto.Tensor([13 * 32], pypto.DT_FP32),
              z: pypto.Tensor([64, 64], pypto.DT_BF16), cfg=None):
            pypto.set_pass_options(vec_nbuffer_setting=cfg.nbuffer)
            pypto.set_vec_tile_shapes(32)
            for j, n in pypto.loop_unroll(0, seq[0], 1, unroll_list=[4, 1], name="u"):
                y[j * 32:(j + n) * 32] = pypto.full([n * 32], 1.0, pypto.DT_FP32)
            pypto.set_cube_tile_shapes([64, 64], [64, 64], [64, 64])
            z[:] = pypto.matmul(x, w, pypto.DT_BF16, extend_params=cfg.extend)
        """)
    cfg = {"nbuffer": {"-1": 16}, "extend": {"scale": 0.5, "relu_type": "RELU"}}
    kernel, text = imported(path, args={"seq.values": [13], "cfg": cfg})
    assert kernel.options.pass_options.vec_nbuffer_setting == {"-1": 16}
    assert "fixpipe" in text
    program = compile_kernel(kernel, hw)
    assert program.root_calls == 3 + 1 + 1        # 3 chunks of 4, 1 of 1, then the matmul
