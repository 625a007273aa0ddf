"""The stand-in's surface around kernels: how kernel files define and call their kernels.

Upstream's examples build many kernels inside functions: a wrapper that takes the caller's
tensor, computes the output shape, defines the kernel over those locals and calls it; or a
factory that returns a kernel for given shapes.  ``ptolab import FILE.py:KERNEL`` builds such
a kernel by running the enclosing function up to the kernel's ``def`` (never the caller's side
after it), with the enclosing function's arguments from ``--arg``.
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipeline.cli import main
from pipeline.commands.import_kernel import _split
from pipeline.frontend import kernel_text, trace_file
from simcore.spec.errors import ConfigError

WRAPPER = """\
import pypto
import torch

CALLED = []


def row_sum(a: torch.Tensor, dim: int, tile: int = 8):
    out_shape = list(a.shape)
    out_shape[dim] = 1

    @pypto.frontend.jit(runtime_options={"stitch_function_max_num": tile})
    def row_sum_kernel(a: pypto.Tensor([], pypto.DT_FP32), out: pypto.Tensor(out_shape)):
        pypto.set_vec_tile_shapes(tile, tile)
        out[:] = pypto.sum(a, dim=dim, keepdim=True)

    CALLED.append("caller side")
    raise RuntimeError("the caller's side must not run")


def make_add(n: int, m: int = 64):
    @pypto.jit
    def add_kernel(x: pypto.Tensor((n, m)), y: pypto.Tensor((n, m)), z: pypto.Tensor((n, m))):
        pypto.set_vec_tile_shapes(16, m)
        z[:] = x + y
    return add_kernel


def make_add_twice(n: int):
    @pypto.jit
    def add_kernel(x: pypto.Tensor((n, 32)), z: pypto.Tensor((n, 32))):
        pypto.set_vec_tile_shapes(8, 32)
        z[:] = x + x
    return add_kernel
"""


@pytest.fixture()
def kernels(tmp_path: Path) -> Path:
    path = tmp_path / "wrapped.py"
    path.write_text(WRAPPER)
    return path


def config(path: Path, function=None, args=None, dims=None) -> dict:
    return yaml.safe_load(kernel_text(trace_file(path, function, dims, args), "test"))


def test_kernel_inside_a_wrapper_reads_the_wrappers_locals(kernels):
    got = config(kernels, "row_sum_kernel", {"a": [4, 48], "dim": 1})
    # out's shape is the wrapper's out_shape, computed from the given tensor's shape
    assert got["tensors"]["a"]["shape"] == [4, 48]
    assert got["tensors"]["out"]["shape"] == [4, 1]
    ops = [s for s in got["body"] if "op" in s]
    assert ops[0]["op"] == "sum" and ops[0]["axis"] == 1
    # the wrapper's default (tile=8) reached the tile shape and the jit options
    assert got["tiles"]["vec"] == [8, 8]
    assert got["options"]["runtime_options"]["stitch_function_max_num"] == 8


def test_wrapper_arguments_change_the_kernel(kernels):
    small = config(kernels, "row_sum_kernel", {"a": [4, 48], "dim": 1, "tile": 16})
    other = config(kernels, "row_sum_kernel", {"a": [4, 48], "dim": 0})
    assert small["tiles"]["vec"] == [16, 16]
    assert other["tensors"]["out"]["shape"] == [1, 48]
    assert [s for s in other["body"] if "op" in s][0]["axis"] == 0


def test_the_callers_side_after_the_def_is_not_run(kernels):
    # the wrapper raises after its def: building the kernel must stop before that line
    got = config(kernels, "row_sum_kernel", {"a": [2, 16], "dim": 1})
    assert got["name"] == "row_sum_kernel"
    text = kernel_text(trace_file(kernels, "row_sum_kernel", None, {"a": [2, 16], "dim": 1}),
                       "t")
    assert "defined inside row_sum()" in text and "row_sum(a=[2, 16], dim=1)" in text


def test_factory_kernel_by_its_name_or_the_factorys(kernels):
    by_kernel = config(kernels, "make_add.add_kernel", {"n": 32})
    by_factory = config(kernels, "make_add", {"n": 32, "m": 128})
    assert by_kernel["tensors"]["x"]["shape"] == [32, 64]
    assert by_factory["tensors"]["z"]["shape"] == [32, 128]
    assert by_factory["tiles"]["vec"] == [16, 128]


def test_ambiguous_nested_name_asks_for_outer_dot_kernel(kernels):
    with pytest.raises(ConfigError, match=r"make_add\.add_kernel, make_add_twice\.add_kernel"):
        trace_file(kernels, "add_kernel", None, {"n": 32})
    got = config(kernels, "make_add_twice.add_kernel", {"n": 16})
    assert got["tensors"]["x"]["shape"] == [16, 32]


def test_missing_enclosing_argument_is_named(kernels):
    with pytest.raises(ConfigError, match=r"inside row_sum\(a, dim, tile\).*--arg dim=VALUE"):
        trace_file(kernels, "row_sum_kernel", None, {"a": [4, 48]})


def test_unknown_name_lists_module_and_nested_kernels(kernels):
    with pytest.raises(ConfigError, match=r"no kernel 'nope'.*row_sum\.row_sum_kernel"):
        trace_file(kernels, "nope", None, {})


def test_cli_takes_outer_dot_kernel(kernels, tmp_path, capsys):
    assert _split(f"{kernels}:make_add.add_kernel") == (kernels, "make_add.add_kernel")
    out = tmp_path / "k.yaml"
    assert main(["import", f"{kernels}:make_add.add_kernel", "--arg", "n=8",
                 "--out", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["tensors"]["x"]["shape"] == [8, 64]


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "k.py"
    path.write_text("import pypto\n" + textwrap.dedent(body))
    return path


def test_set_matrix_size_is_noted_not_dropped(tmp_path):
    path = write(tmp_path, """
        @pypto.jit
        def mm(a: pypto.Tensor((64, 128)), b: pypto.Tensor((128, 32)),
               c: pypto.Tensor((64, 32))):
            pypto.set_cube_tile_shapes([64, 64], [128, 128], [32, 32])
            pypto.set_matrix_size([64, 128, 32])
            c[:] = pypto.matmul(a, b, pypto.DT_FP32)
        """)
    text = kernel_text(trace_file(path), "t")
    assert "# note: set_matrix_size([64, 128, 32]) at k.py:7" in text
    bad = write(tmp_path, """
        @pypto.jit
        def mm(a: pypto.Tensor((64, 128)), c: pypto.Tensor((64, 128))):
            pypto.set_matrix_size([64, 128])
            c[:] = a + a
        """)
    with pytest.raises(ConfigError, match=r"mm\(\) at .*k.py:5: pypto.set_matrix_size takes"):
        trace_file(bad)


def test_a_note_repeated_by_an_unrolled_body_is_said_once(tmp_path):
    path = write(tmp_path, """
        @pypto.jit
        def mm(a: pypto.Tensor((64, 128)), b: pypto.Tensor((128, 32)),
               c: pypto.Tensor((64, 32))):
            pypto.set_cube_tile_shapes([64, 64], [128, 128], [32, 32])
            for _ in range(3):
                pypto.set_matrix_size([64, 128, 32])
            c[:] = pypto.matmul(a, b, pypto.DT_FP32)
        """)
    text = kernel_text(trace_file(path), "t")
    assert text.count("# note: set_matrix_size([64, 128, 32]) at k.py:8") == 1


def test_a_long_condition_of_a_branch_is_written_once(tmp_path):
    """Every op of a symbolic if's branch carries its condition; a long one is written once
    as a YAML anchor and named by its alias on the other ops: the kernel loads the same."""
    path = write(tmp_path, """
        @pypto.jit
        def k(seq: pypto.Tensor((4,), pypto.DT_INT32), a: pypto.Tensor((4, 64)),
              out: pypto.Tensor((4, 64))):
            pypto.set_vec_tile_shapes(1, 64)
            for b in pypto.loop(4, name="B", idx_name="b"):
                if pypto.min(seq[b] * 3 + 7, seq[b] * 5 - 2) // 4 > pypto.max(seq[b] - 1, 2) % 3:
                    x = pypto.exp(a[b:b + 1, :])
                    out[b:b + 1, :] = x + 1.0
        """)
    text = kernel_text(trace_file(path, args={"seq.values": [1, 2, 3, 4]}), "t")
    assert text.count("cond: &if1 ") == 1 and text.count("cond: *if1") >= 2
    body = next(s for s in yaml.safe_load(text)["body"] if "loop" in s)["body"]
    conds = {s["cond"] for s in body if "op" in s}
    assert len(conds) == 1 and len(conds.pop()) > 60


def test_unknown_namespace_call_stops_with_function_and_line(tmp_path):
    path = write(tmp_path, """
        SYNC = pypto.runtime.device_synchronize   # module level: only a reference

        @pypto.jit
        def k(a: pypto.Tensor((16, 16)), c: pypto.Tensor((16, 16))):
            pypto.set_vec_tile_shapes(16, 16)
            pypto.runtime.device_synchronize()
            c[:] = a + a
        """)
    with pytest.raises(ConfigError, match=r"k\(\) at .*k.py:8: pypto.runtime.device_synchronize "
                                          r"is not supported.*Supported: jit"):
        trace_file(path)


LOOP_ADD = """
    @pypto.jit(pass_options={{"vec_nbuffer_setting": {{"DEFAULT": 2}}}})
    def k(x: pypto.Tensor((64, 64)), y: pypto.Tensor((64, 64))):
        pypto.set_vec_tile_shapes(8, 64)
        {body}
        y[:] = x + 1.0
    """


def test_merge_settings_in_the_body_become_kernel_wide_and_merge_tasks(tmp_path):
    from simcore.compiler import compile_kernel
    from simcore.spec.hardware import load_hardware
    from simcore.spec.kernel import Kernel
    hw = load_hardware("dav_2201")

    def compiled(body: str):
        path = write(tmp_path, LOOP_ADD.format(body=body))
        text = kernel_text(trace_file(path), "t")
        cfg = yaml.safe_load(text)
        return cfg, text, compile_kernel(Kernel.model_validate(cfg), hw).counts()

    jit_only, _, a = compiled("pass")
    body, text, b = compiled('pypto.set_pass_options(vec_nbuffer_setting={"DEFAULT": 8})')
    assert jit_only["options"]["pass_options"]["vec_nbuffer_setting"] == {"DEFAULT": 2}
    # the body's value overrides the jit's, and the header says where it came from
    assert body["options"]["pass_options"]["vec_nbuffer_setting"] == {"DEFAULT": 8}
    assert "set_pass_options(vec_nbuffer_setting={'DEFAULT': 8}) at k.py:6" in text
    # 8 row tiles: merged 2 per task -> 4 tasks, 8 per task -> 1 task
    assert (a["leaf_tasks"], b["leaf_tasks"]) == (4, 1)


def test_merge_setting_twice_with_different_values_stops(tmp_path):
    path = write(tmp_path, LOOP_ADD.format(
        body='pypto.set_pass_options(vec_nbuffer_setting={"DEFAULT": 8})\n'
             '        pypto.set_pass_options(vec_nbuffer_setting={"DEFAULT": 4})'))
    with pytest.raises(ConfigError, match=r"k\(\) at .*k.py:7: .*per-loop merge settings are "
                                          r"not modeled"):
        trace_file(path)
    bad = write(tmp_path, LOOP_ADD.format(body='pypto.set_pass_options(vec_nbuffer_setting=4)'))
    with pytest.raises(ConfigError, match=r"takes a dict of hashOrder keys"):
        trace_file(bad)


def test_combine_axis_becomes_a_statement_and_other_options_stop(tmp_path):
    path = write(tmp_path, LOOP_ADD.format(
        body="pypto.experimental.set_operation_options(combine_axis=True)"))
    text = kernel_text(trace_file(path), "t")
    assert "- {set_operation_options: {combine_axis: true}}   # k.py:6" in text
    from simcore.spec.kernel import Kernel
    kernel = Kernel.model_validate(yaml.safe_load(text))
    assert any(getattr(stmt, "set_operation_options", None) is not None
               and stmt.set_operation_options.combine_axis for stmt in kernel.body)
    bad = write(tmp_path, LOOP_ADD.format(
        body="pypto.experimental.set_operation_options(fuse_all=True)"))
    with pytest.raises(ConfigError, match=r"fuse_all=...\) is not an operation option.*"
                                          r"Supported: combine_axis"):
        trace_file(bad)


def test_pypto_submodules_import_and_op_wrapper_traces(tmp_path):
    import sys
    path = write(tmp_path, """
        import pypto.pypto_impl as impl          # module level: imports, used only if called
        from pypto.operation import op_wrapper


        @op_wrapper
        def plus_one(t):
            return t + 1.0


        @pypto.jit
        def k(a: pypto.Tensor((16, 16)), c: pypto.Tensor((16, 16))):
            pypto.set_vec_tile_shapes(16, 16)
            c[:] = plus_one(a)
        """)
    got = yaml.safe_load(kernel_text(trace_file(path), "t"))
    ops = [s for s in got["body"] if "op" in s]
    assert ops[0]["op"] == "add" and ops[0]["scalar"] == 1.0
    assert ops[0]["src"] == "k.py:15"           # op_wrapper: the call site, as upstream
    assert not [m for m in sys.modules if m.startswith("pypto")]


def test_platform_query_stops_instead_of_being_false(tmp_path):
    path = write(tmp_path, """
        @pypto.jit
        def k(a: pypto.Tensor((16, 16)), c: pypto.Tensor((16, 16))):
            pypto.set_vec_tile_shapes(16, 16)
            if pypto.platform.npuarch == "DAV_3510":
                c[:] = a + a
            else:
                c[:] = a * a
        """)
    with pytest.raises(ConfigError, match=r"k\(\) at .*k.py:6: pypto.platform.npuarch == "
                                          r"'DAV_3510' is not supported.*the study's hardware"):
        trace_file(path)


def test_host_compile_flags_of_jit_are_noted_and_other_keywords_stop(tmp_path):
    """``new_ir`` and ``create_new_logical_tensor`` pick how upstream's host compiles the
    kernel: they import with a note.  Any other keyword that is no option group stops with
    its name, not with a Python error from inside ptolab."""
    path = write(tmp_path, """
        @pypto.frontend.jit(new_ir=True, create_new_logical_tensor=False,
                            runtime_options={"stitch_function_max_num": 4})
        def k(a: pypto.Tensor((16, 16)), c: pypto.Tensor((16, 16))):
            pypto.set_vec_tile_shapes(16, 16)
            c[:] = a + a
        """)
    traced = trace_file(path)
    assert traced.options == {"runtime_options": {"stitch_function_max_num": 4}}
    text = kernel_text(traced, "t")
    assert "new_ir=True acts on the host compile only" in text
    assert "create_new_logical_tensor=False acts on the host compile only" in text
    bad = write(tmp_path, """
        @pypto.frontend.jit(fast=True)
        def k(a: pypto.Tensor((16, 16)), c: pypto.Tensor((16, 16))):
            pypto.set_vec_tile_shapes(16, 16)
            c[:] = a + a
        """)
    with pytest.raises(ConfigError, match=r"jit option 'fast=True' is neither an option group"):
        trace_file(bad)


def test_runtime_options_upstream_dropped_import_with_a_note(tmp_path):
    """The GDR case's kernels set the stitch pools of the runtime at 08cec41e4
    (``stitch_function_inner_memory`` and friends), which upstream's HEAD no longer has: the
    kernel imports without them and says so, whether the jit or the body sets them, and
    keeps the stitch it does set."""
    path = write(tmp_path, """
        @pypto.frontend.jit(runtime_options={"stitch_function_inner_memory": 128,
                                             "stitch_function_max_num": 16})
        def k(a: pypto.Tensor((16, 16)), c: pypto.Tensor((16, 16))):
            pypto.set_runtime_options(stitch_function_num_initial=128,
                                      triple_stream_sched=True)
            pypto.set_vec_tile_shapes(16, 16)
            c[:] = a + a
        """)
    traced = trace_file(path)
    assert traced.options["runtime_options"] == {"stitch_function_max_num": 16}
    text = kernel_text(traced, "t")
    note = next(line for line in text.splitlines() if "08cec41e4" in line)
    assert "stitch_function_inner_memory" in note and "stitch_function_num_initial" in note
    assert "triple_stream_sched" in note
    # no other note says the retired ones apply to the kernel
    assert not [line for line in text.splitlines() if "applies to the whole" in line
                and "stitch_function_num_initial" in line]


SCOPE_IF = """
    @pypto.jit
    def k(a: pypto.Tensor((16, 16)), n: pypto.Tensor((1,), pypto.DT_INT32),
          c: pypto.Tensor((16, 16))):
        pypto.set_vec_tile_shapes(16, 16)
        for i in pypto.loop(2):
            if pypto.cond(i == 0):
                pypto.set_pass_options(sg_set_scope=1)
                c[:] = a + a
                pypto.set_pass_options(sg_set_scope={after})
            else:
                c[:] = a * a
            {tail}
    """


def test_a_state_the_branches_leave_different_stops_only_the_op_that_needs_it(tmp_path):
    """sg_set_scope=-1 is the state a kernel starts in, so a branch that sets a scope and
    resets it ends where a branch that never set one does.  A state the branches leave
    different is unknown after the if: an op that needs it stops, naming the if's line and
    both states, unless the kernel sets it again first (upstream's glm_attention re-sets its
    TileShape after such an if)."""
    fine = write(tmp_path, SCOPE_IF.format(after=-1, tail="c[:] = a - a"))
    assert "sg_set_scope: 1" in kernel_text(trace_file(fine), "t")
    kept = write(tmp_path, SCOPE_IF.format(after=2, tail="c[:] = a - a"))
    with pytest.raises(ConfigError, match=r"k\(\) at .*k.py:14: 'sub' needs sg_set_scope, "
                                          r"which the branches of the symbolic if at .*k.py:8 "
                                          r"leave different \(2 after the if branch, -1 after "
                                          r"the else\)"):
        trace_file(kept)
    reset = write(tmp_path, SCOPE_IF.format(
        after=2, tail="pypto.set_pass_options(sg_set_scope=-1)\n        c[:] = a - a"))
    body = yaml.safe_load(kernel_text(trace_file(reset), "t"))["body"]
    loop = next(s for s in body if isinstance(s, dict) and "loop" in s)["body"]
    scopes = [s["sg_set_scope"] for s in loop if isinstance(s, dict) and "sg_set_scope" in s]
    assert scopes[-1] == -1 and 2 in scopes      # the reset after the if is written out
    nothing_after = write(tmp_path, SCOPE_IF.format(after=2, tail=""))
    trace_file(nothing_after)                    # no op needs the unknown state


UNROLLED = """
    @pypto.jit
    def k(x: pypto.Tensor([pypto.DYNAMIC, 64]), y: pypto.Tensor([pypto.DYNAMIC, 64])):
        for b, unroll in pypto.loop_unroll(0, x.shape[0], 1, name="rows", idx_name="b",
                                           unroll_list=[4, 1]):
            pypto.set_vec_tile_shapes(1, 64)
            t = pypto.view(x, [unroll, 64], [b, 0])
            y[b:b + unroll, :] = t + 1.0
    """


def test_a_tile_shape_first_set_inside_an_unrolled_copy_is_set_in_every_copy(tmp_path):
    """Each loop_unroll copy is a loop of its own: a TileShape first set inside one is unset
    again after it, so the next copy writes its own set out, even when it sets the same
    value, rather than relying on a copy that may run zero times."""
    path = write(tmp_path, UNROLLED)
    body = yaml.safe_load(kernel_text(trace_file(path, dims={"x_0": 8, "y_0": 8}), "t"))["body"]
    loops = [s for s in body if isinstance(s, dict) and "loop" in s]
    assert len(loops) == 2
    for loop in loops:
        assert any(isinstance(s, dict) and "set_vec_tile_shapes" in s for s in loop["body"])


def test_clone_copies_and_unsqueeze_reshapes(tmp_path):
    """pypto.clone is upstream's Assign: a copy of every tile into a tensor of its own;
    pypto.unsqueeze is Reshape with a dim of 1 inserted (not inplace, so a copy too)."""
    path = write(tmp_path, """
        @pypto.jit
        def k(a: pypto.Tensor((16, 32)), c: pypto.Tensor((16, 32)),
              d: pypto.Tensor((16, 1, 32))):
            pypto.set_vec_tile_shapes(16, 32)
            b = pypto.clone(a)
            c[:] = b.clone() + 1.0
            pypto.set_vec_tile_shapes(16, 1, 32)
            d[:] = pypto.unsqueeze(a, -2)
        """)
    body = yaml.safe_load(kernel_text(trace_file(path), "t"))["body"]
    ops = [s["op"] for s in body if isinstance(s, dict) and "op" in s]
    assert ops.count("copy") == 2
    reshape = next(s for s in body if isinstance(s, dict) and s.get("op") == "reshape")
    assert reshape["shape"] == [16, 1, 32] and reshape["inplace"] is False
    bad = write(tmp_path, """
        @pypto.jit
        def k(a: pypto.Tensor((16, 32)), d: pypto.Tensor((16, 1, 32))):
            pypto.set_vec_tile_shapes(16, 32)
            d[:] = pypto.unsqueeze(a, 3)
        """)
    with pytest.raises(ConfigError, match=r"unsqueeze dim 3 is not a position in shape"):
        trace_file(bad)


CONFIG_KERNEL = """
    from dataclasses import dataclass


    @dataclass
    class NormConfig:
        rows: int
        eps: float = 1e-6
        tile: int = 8


    @pypto.jit
    def k(x: pypto.Tensor((16, 64)), y: pypto.Tensor((16, 64)), cfg: NormConfig):
        pypto.set_vec_tile_shapes(cfg.tile, 64)
        y[:] = x + cfg.eps
    """


def test_a_json_argument_builds_the_dataclass_it_is_annotated_with(tmp_path):
    """Upstream kernels take config dataclasses: a JSON object builds that class, so the
    fields it leaves out take the class's defaults, and a missing or unknown field is
    named with the class's fields."""
    path = write(tmp_path, CONFIG_KERNEL)
    kernel = yaml.safe_load(kernel_text(trace_file(path, args={"cfg": {"rows": 16}}), "t"))
    body = kernel["body"]
    assert kernel["tiles"]["vec"] == [8, 64]               # tile from the class default
    add = next(s for s in body if isinstance(s, dict) and s.get("op") == "add")
    assert add["scalar"] == pytest.approx(1e-6)
    with pytest.raises(ConfigError, match=r"--arg cfg: depth not a field of NormConfig "
                                          r"\(fields: eps, rows, tile\)"):
        trace_file(path, args={"cfg": {"rows": 16, "depth": 2}})
    with pytest.raises(ConfigError, match=r"--arg cfg: NormConfig\(tile\) fails.*"
                                          r"without defaults: rows"):
        trace_file(path, args={"cfg": {"tile": 4}})
    with pytest.raises(ConfigError, match=r"kernel argument 'cfg' is not a pypto.Tensor.*"
                                          r"an object of NormConfig's fields \(without "
                                          r"defaults: rows\)"):
        trace_file(path)


def test_expand_clone_becomes_an_expand_and_refuses_what_does_not_broadcast(tmp_path):
    path = write(tmp_path, """
        @pypto.jit
        def k(a: pypto.Tensor((16, 1)), c: pypto.Tensor((4, 16, 64))):
            pypto.set_vec_tile_shapes(4, 16, 64)
            c[:] = pypto.expand_clone(a, [4, 16, 64]) + a.expand_clone([16, 64])
        """)
    body = yaml.safe_load(kernel_text(trace_file(path), "t"))["body"]
    expands = [s for s in body if isinstance(s, dict) and s.get("op") == "expand"]
    assert [e["shape"] for e in expands] == [[4, 16, 64], [16, 64]]
    bad = write(tmp_path, """
        @pypto.jit
        def k(a: pypto.Tensor((16, 2)), c: pypto.Tensor((16, 64))):
            pypto.set_vec_tile_shapes(16, 64)
            c[:] = pypto.expand_clone(a, [16, 64])
        """)
    with pytest.raises(ConfigError, match=r"expand_clone of shape \[16, 2\] to \[16, 64\]"):
        trace_file(bad)


def test_comparisons_logical_not_and_where_trace_to_bool_masks(tmp_path):
    """pypto.ge / < / logical_not give bool tensors; where takes one and broadcasts a scalar
    operand into a tile of its own (a full); a scalar on the left of a comparison turns it
    round; == on tensors names pypto.eq instead."""
    path = write(tmp_path, """
        @pypto.jit
        def k(s: pypto.Tensor((64, 256)), c: pypto.Tensor((64, 256))):
            pypto.set_vec_tile_shapes(16, 256)
            keep = pypto.logical_not(0.5 < s)
            c[:] = pypto.where(keep, s, float("-inf")) + pypto.where(pypto.ge(s, 0.0), 1.0, 0.0)
        """)
    body = yaml.safe_load(kernel_text(trace_file(path), "t"))["body"]
    ops = [s for s in body if isinstance(s, dict) and "op" in s]
    assert [o["op"] for o in ops if o["op"] in ("gt", "ge", "logical_not", "where")] == \
        ["gt", "logical_not", "where", "ge", "where"]
    assert next(o for o in ops if o["op"] == "gt")["scalar"] == 0.5      # s > 0.5
    fills = [o["value"] for o in ops if o["op"] == "full"]
    assert fills[0] == float("-inf") and fills[1:] == [1.0, 0.0]
    bad = write(tmp_path, """
        @pypto.jit
        def k(s: pypto.Tensor((64, 256)), c: pypto.Tensor((64, 256))):
            pypto.set_vec_tile_shapes(16, 256)
            c[:] = pypto.where(s == 0.0, s, 1.0)
        """)
    with pytest.raises(ConfigError, match=r"tensor == and != are not elementwise.*pypto.eq"):
        trace_file(bad)
    not_bool = write(tmp_path, """
        @pypto.jit
        def k(s: pypto.Tensor((64, 256)), c: pypto.Tensor((64, 256))):
            pypto.set_vec_tile_shapes(16, 256)
            c[:] = pypto.where(s, s, 1.0)
        """)
    with pytest.raises(ConfigError, match=r"where condition is a DT_FP32 tensor"):
        trace_file(not_bool)


def test_zeros_ones_fill_and_div_takes_its_precision_positionally(tmp_path):
    path = write(tmp_path, """
        @pypto.jit
        def k(a: pypto.Tensor((16, 64)), c: pypto.Tensor((16, 64))):
            pypto.set_vec_tile_shapes(16, 64)
            z = pypto.zeros(16, 64) + pypto.ones([16, 64], dtype=pypto.DT_FP32)
            c[:] = pypto.div(a + z, a, pypto.PrecisionType.HIGH_PRECISION)
        """)
    body = yaml.safe_load(kernel_text(trace_file(path), "t"))["body"]
    fills = [(s["shape"], s["value"]) for s in body
             if isinstance(s, dict) and s.get("op") == "full"]
    assert fills == [([16, 64], 0.0), ([16, 64], 1.0)]
    assert any(isinstance(s, dict) and s.get("op") == "div" for s in body)


def test_symbolic_scalar_of_an_int_is_that_int_and_reshape_takes_leading_valid_rows(tmp_path):
    path = write(tmp_path, """
        @pypto.jit
        def k(a: pypto.Tensor((32, 64)), c: pypto.Tensor((64, 32))):
            pypto.set_vec_tile_shapes(32, 64)
            e = pypto.exp(a)
            r = pypto.reshape(e, [64, 32], valid_shape=[16, 32])
            pypto.set_vec_tile_shapes(64, 32)
            c[0 * pypto.symbolic_scalar(32):, 0:] = r + 1.0
        """)
    body = yaml.safe_load(kernel_text(trace_file(path), "t"))["body"]
    reshape = next(s for s in body if isinstance(s, dict) and s.get("op") == "reshape")
    assert reshape["valid_shape"] == [16, 32]
    cols = write(tmp_path, """
        @pypto.jit
        def k(a: pypto.Tensor((32, 64)), c: pypto.Tensor((64, 32))):
            pypto.set_vec_tile_shapes(32, 64)
            r = pypto.reshape(pypto.exp(a), [64, 32], valid_shape=[64, 16])
            c[:] = r
        """)
    with pytest.raises(ConfigError, match=r"valid_shape smaller than its shape off its first"):
        trace_file(cols)


SCATTER_KERNEL = """
    @pypto.jit
    def k(x: pypto.Tensor((4, 128), pypto.DT_FP16),
          index: pypto.Tensor((4,), pypto.DT_INT64),
          cache: pypto.Tensor((16, 128, 1, 128), pypto.DT_FP16),
          cache_out: pypto.Tensor((16, 128, 1, 128), pypto.DT_FP16)):
        idx = pypto.reshape(index, [4, 1], inplace=True)
        rows = pypto.view(idx, [4, 1], [0, 0])
        pypto.set_vec_tile_shapes(4, 128)
        k4 = pypto.reshape(pypto.exp(x), [4, 1, 1, 128])
        pypto.set_vec_tile_shapes(4, 1, 1, 128)
        cache_out.move(pypto.scatter_update(cache, -2, rows, k4))
    """


def _rows_written(program):
    """(region index, line) of every GM write: a 256-byte fp16 row of the cache is one
    512-byte L2 line of one 32 KiB region."""
    regions = program.regions
    out = set()
    for region, lines in zip(regions.region[regions.write], regions.lines[regions.write]):
        bits = [b for b in range(64) if int(lines) >> b & 1]
        out |= {(int(region) & ((1 << 40) - 1), b) for b in bits}
    return out


@pytest.mark.usefixtures("consecutive_regions")
def test_scatter_update_writes_each_row_where_its_index_value_says(tmp_path):
    """pypto.scatter_update(cache, -2, index, src) into a paged [blocks, 128, 1, d] cache:
    row i of src goes to block index[i] // 128, slot index[i] % 128, read through a view of
    an in-place reshape of the index argument.  The leaf task reads the index values, not
    the control flow: the tensor carries them but is no control-flow input (no host
    fetch).  The move of the result into the output renames it (upstream's Move), so no
    copy of the 8 MiB cache is made."""
    from simcore.compiler import compile_kernel
    from simcore.spec.hardware import load_hardware
    from simcore.spec.kernel import Kernel
    path = write(tmp_path, SCATTER_KERNEL)
    with pytest.raises(ConfigError, match=r"--arg index.values="):
        trace_file(path)
    values = [5, 200, 1030, 2047]
    cfg = yaml.safe_load(kernel_text(trace_file(path, args={"index.values": values}), "t"))
    assert cfg["values"] == {"index": values}
    assert cfg["tensors"]["index"]["control_flow_input"] is False
    assert "move" not in [s.get("op") for s in cfg["body"] if isinstance(s, dict)]
    program = compile_kernel(Kernel.model_validate(cfg), load_hardware("dav_2201"))
    assert program.control_inputs == ()
    assert program.leaf_tasks == 1
    # row r sits at byte 256 r of the cache: region 256 r // 32768, line (256 r % 32768) // 512
    assert _rows_written(program) == {(256 * r // 32768, 256 * r % 32768 // 512)
                                      for r in values}
    assert program.regions.bytes[program.regions.write].sum() == 4 * 256


def test_scatter_update_checks_its_dim_and_shapes(tmp_path):
    wrong_dim = write(tmp_path, SCATTER_KERNEL.replace("cache, -2,", "cache, 0,"))
    with pytest.raises(ConfigError, match=r"scatter_update into a 4-D tensor along dim 0"):
        trace_file(wrong_dim, args={"index.values": [0, 1, 2, 3]})
    wrong_src = write(tmp_path, SCATTER_KERNEL.replace("[4, 1, 1, 128]", "[2, 2, 1, 128]"))
    with pytest.raises(ConfigError, match=r"src of shape \[2, 2, 1, 128\].*expected \[4, 1, 1"):
        trace_file(wrong_src, args={"index.values": [0, 1, 2, 3]})


STATE_SCATTER_KERNEL = """
    @pypto.jit
    def k(state: pypto.Tensor((8, 4, 256), pypto.DT_FP32),
          x: pypto.Tensor((2, 256), pypto.DT_FP32),
          out: pypto.Tensor((8, 256), pypto.DT_FP32)):
        pypto.set_vec_tile_shapes(4)
        slots = pypto.arange(4)
        slots = pypto.reshape(slots, [1, 4], inplace=True)
        for b in pypto.loop(8, name="B", idx_name="b"):
            pypto.set_vec_tile_shapes(4, 256)
            st = pypto.view(state, [1, 4, 256], [b, 0, 0])
            flat = pypto.reshape(st, [4, 256])
            src = pypto.exp(x)
            index = pypto.view(slots, [1, 2], [0, 1], valid_shape=[1, VALID])
            flat = pypto.scatter_update(flat, -2, index, src)
            out[b:b + 1, :] = pypto.sum(flat, 0, keepdim=True)
    """


def _scatter_rows(cfg):
    """(offsets, cond) of every scatter_update in the traced kernel's loop body."""
    body = next(s for s in cfg["body"] if "loop" in s)["body"]
    return [(s["offsets"], s.get("cond")) for s in body
            if isinstance(s, dict) and s.get("op") == "scatter_update"]


def test_scatter_update_into_a_copying_reshape_of_a_view(tmp_path):
    """The compressor's scatter_update_3d: rows go into a copying reshape of a view of the
    state (an on-chip value).  Upstream scatters into that copy, a tensor of its own in GM:
    the value is written to a kernel temporary, the rows go there, and later reads read it.
    Its row indices are a view of pypto.arange: known while tracing, so no --arg values;
    only the index's valid entries name rows (a valid_shape of 1 skips the second row, one
    that names the loop index makes each row's write conditional)."""
    from simcore.compiler import compile_kernel
    from simcore.spec.hardware import load_hardware
    from simcore.spec.kernel import Kernel
    path = write(tmp_path, STATE_SCATTER_KERNEL.replace("VALID", "2"))
    cfg = yaml.safe_load(kernel_text(trace_file(path), "t"))
    assert "values" not in cfg
    # besides the workspace the arange travels through into the loop's root function
    temps = [n for n, t in cfg["tensors"].items()
             if t["role"] == "temporary" and not n.endswith("_ws")]
    assert len(temps) == 1 and cfg["tensors"][temps[0]]["shape"] == [4, 256]
    # made in the loop's body: memory of its own in each iteration, as upstream's
    assert cfg["tensors"][temps[0]]["fresh_per"] == "B"
    body = next(s for s in cfg["body"] if "loop" in s)["body"]
    assert [s["out"] for s in body if s.get("op") == "scatter_update"] == temps * 2
    assert _scatter_rows(cfg) == [([1, 0], None), ([2, 0], None)]  # arange(4)[1:3]
    program = compile_kernel(Kernel.model_validate(cfg), load_hardware("dav_2201"))
    assert program.root_calls == 1 + 8      # the arange's, then one per b
    assert program.leaf_tasks > 8
    one = write(tmp_path, STATE_SCATTER_KERNEL.replace("VALID", "1"))
    assert _scatter_rows(yaml.safe_load(kernel_text(trace_file(one), "t"))) == [([1, 0], None)]
    by_loop = write(tmp_path, STATE_SCATTER_KERNEL.replace("VALID", "b % 2 + 1"))
    rows = _scatter_rows(yaml.safe_load(kernel_text(trace_file(by_loop), "t")))
    assert [r[0] for r in rows] == [[1, 0], [2, 0]]
    assert all("b % 2" in cond for _, cond in rows)


def test_an_inplace_reshape_of_a_value_from_another_root_function_is_a_window(tmp_path):
    """An op's result made before a pypto.loop and reshaped in place inside it (the
    compressor's kv_t) is read from the GM workspace it is spilled to: the reshape is a
    window on that tensor, as upstream's in-place reshape of GM, not a copy whose result
    would need spilling again."""
    from simcore.compiler import compile_kernel
    from simcore.spec.hardware import load_hardware
    from simcore.spec.kernel import Kernel
    path = write(tmp_path, """
        @pypto.jit
        def k(a: pypto.Tensor((8, 64)), out: pypto.Tensor((4, 2, 64))):
            pypto.set_vec_tile_shapes(8, 64)
            e = pypto.exp(a)
            for _ in pypto.loop(1):
                pypto.set_pass_options(sg_set_scope=1)
                e = pypto.reshape(e, [4, 2, 64], inplace=True)
            for i in pypto.loop(4, name="I", idx_name="i"):
                pypto.set_vec_tile_shapes(1, 2, 64)
                out[i:i + 1, :, :] = e[i:i + 1, :, :] + 1.0
        """)
    cfg = yaml.safe_load(kernel_text(trace_file(path), "t"))
    statements = list(_statements(cfg["body"]))
    reshapes = [s for s in statements if s.get("op") == "reshape"]
    assert [(r["inputs"], r.get("inplace")) for r in reshapes] == [(["e_ws"], True)]
    assert [s.get("op") for s in statements].count("assemble") == 1 + 1   # the spill, out
    program = compile_kernel(Kernel.model_validate(cfg), load_hardware("dav_2201"))
    assert program.leaf_tasks >= 1 + 4


def _statements(body):
    for s in body:
        yield s
        yield from _statements(s.get("body", []))


def test_a_value_spilled_between_root_functions_has_memory_per_iteration(tmp_path):
    """An op's result made in a pypto.loop body and used in a loop nested in it goes through
    a GM workspace written anew in every iteration of the loop that makes it (upstream's
    exclusive outcast of the producing call); one made before any loop is one buffer."""
    path = write(tmp_path, """
        @pypto.jit
        def k(a: pypto.Tensor((4, 8, 64)), out: pypto.Tensor((4, 8, 64))):
            pypto.set_vec_tile_shapes(8, 64)
            w = pypto.exp(a[0, :, :])
            for b in pypto.loop(4, name="B", idx_name="b"):
                pypto.set_vec_tile_shapes(8, 64)
                e = pypto.exp(a[b, :, :]) + w
                for j in pypto.loop(2, name="J", idx_name="j"):
                    pypto.set_vec_tile_shapes(4, 64)
                    out[b, j * 4:j * 4 + 4, :] = e[j * 4:j * 4 + 4, :] + 1.0
        """)
    tensors = yaml.safe_load(kernel_text(trace_file(path), "t"))["tensors"]
    assert tensors["e_ws"]["fresh_per"] == "B"
    assert "fresh_per" not in tensors["w_ws"]


def test_symbolic_scalar_of_an_int_is_a_symbolic_constant(tmp_path):
    """pypto.SymbolicScalar(0) has the methods of a symbolic int; one named by a string (a
    runtime variable) stops with a clear error."""
    path = write(tmp_path, """
        @pypto.jit
        def k(a: pypto.Tensor((8, 64)), out: pypto.Tensor((8, 64))):
            pypto.set_vec_tile_shapes(8, 64)
            n = pypto.SymbolicScalar(8).min(4) + pypto.SymbolicScalar(4)
            out[0:n, :] = a[0:n, :] + 1.0
        """)
    cfg = yaml.safe_load(kernel_text(trace_file(path), "t"))
    assert cfg["tensors"]["out"]["shape"] == [8, 64]
    named = write(tmp_path, """
        @pypto.jit
        def k(a: pypto.Tensor((8, 64)), out: pypto.Tensor((8, 64))):
            n = pypto.SymbolicScalar("n") + 1
            out[:] = a + 1.0
        """)
    with pytest.raises(ConfigError, match=r"SymbolicScalar\('n'\).*named by a string"):
        trace_file(named)


def test_moving_gm_data_renames_it_or_copies_input_data(tmp_path):
    """Upstream's Tensor.move (and x[:] = v) repoints the tensor: an on-chip value moved
    into a pypto.tensor is renamed (the kernel op rename), a pypto.tensor the kernel wrote is
    renamed with no op (a note says where the data stays), while kernel input data (a view
    of an input) leaves through the output's address, a move through UB, and an on-chip
    value through an assemble."""
    path = write(tmp_path, """
        @pypto.jit
        def k(a: pypto.Tensor((32, 64)), out: pypto.Tensor((32, 64)),
              first: pypto.Tensor((8, 64)), c: pypto.Tensor((32, 64))):
            pypto.set_vec_tile_shapes(8, 64)
            tmp = pypto.tensor([32, 64], pypto.DT_FP32, "tmp")
            tmp[:] = a + 1.0
            out[:] = tmp
            first[:] = a[0:8, :]
            c.move(a * 2.0)
        """)
    text = kernel_text(trace_file(path), "t")
    cfg = yaml.safe_load(text)
    ops = [(s["op"], s["out"]) for s in cfg["body"] if isinstance(s, dict) and "op" in s]
    assert [o for o in ops if o[0] in ("assemble", "move", "rename")] == \
        [("rename", "tmp"), ("move", "move"), ("assemble", "first"), ("assemble", "c")]
    assert "# note: 'out' takes the data of 'tmp'" in text


GM_RESHAPE = """
    @pypto.jit
    def k(h: pypto.Tensor((128, 128), pypto.DT_BF16),
          y: pypto.Tensor(({shape}), pypto.DT_BF16)):
        pypto.set_vec_tile_shapes(1, {tile}, 128)
        y[:] = pypto.reshape(h, [{shape}], valid_shape=[{valid}]) + 1.0
    """


def test_a_gm_reshape_whose_valid_shape_is_its_shape_is_the_plain_reshape(tmp_path):
    path = write(tmp_path, GM_RESHAPE.format(shape="1, 128, 128", tile=128,
                                             valid="1, 128, 128"))
    body = yaml.safe_load(kernel_text(trace_file(path), "t"))["body"]
    reshape = next(s for s in body if isinstance(s, dict) and s.get("op") == "reshape")
    assert reshape["inplace"] is False and "valid_shape" not in reshape
    partial = write(tmp_path, GM_RESHAPE.format(shape="2, 64, 128", tile=64,
                                                valid="2, 32, 128"))
    with pytest.raises(ConfigError, match=r"a valid_shape cut off any dim but the first"):
        trace_file(partial)


def test_int_indices_view_and_reshape_and_a_moved_value_keeps_earlier_reads(tmp_path):
    """x[b, h] of a 4-D tensor is upstream's view of extent 1 at b, h followed by a reshape
    without those dims (a copy: the reshape of a view is not inplace); y[r:r + n, h] = v
    reshapes v with a dim of 1 at h and assembles it, its extent n found whatever r reads
    (seq[b]).  `acc[:] = new` renames the on-chip `acc`: the op that read acc before still
    reads the old value."""
    path = write(tmp_path, """
        @pypto.jit
        def k(states: pypto.Tensor((2, 4, 16, 32)), seq: pypto.Tensor((3,), pypto.DT_INT32),
              out: pypto.Tensor((64, 4, 32)), last: pypto.Tensor((2, 4, 16, 32))):
            pypto.set_vec_tile_shapes(16, 32)
            for b in range(2):
                acc = states[b, 1]
                first = acc + 1.0
                acc[:] = first * 2.0
                out[seq[b]:seq[b] + 16, 1] = first
                last[b, 1] = acc
        """)
    cfg = yaml.safe_load(kernel_text(trace_file(path, args={"seq.values": [0, 16, 32]}), "t"))
    ops = [s for s in cfg["body"] if isinstance(s, dict) and "op" in s]
    views = [o for o in ops if o["op"] == "view"]
    assert views[0]["shape"] == [1, 1, 16, 32] and views[0]["offsets"] == [0, 1, 0, 0]
    reshapes = [o for o in ops if o["op"] == "reshape"]
    assert reshapes[0]["shape"] == [16, 32] and reshapes[0]["inplace"] is False
    assert [16, 1, 32] in [o["shape"] for o in reshapes]        # v gains the dim of h
    adds = [o for o in ops if o["op"] == "add"]
    muls = [o for o in ops if o["op"] == "mul"]
    assert adds[0]["inputs"] == [reshapes[0]["out"]]            # read before the rename
    into_out = [o["offsets"][:2] for o in ops if o["op"] == "assemble" and o["out"] == "out"]
    assert into_out == [["seq[0]", 1], ["seq[1]", 1]]
    # last[b, 1] = acc writes the renamed acc: the product
    last = next(o for o in ops if o["op"] == "assemble" and o["out"] == "last")
    source = next(o for o in reshapes if o["out"] == last["inputs"][0])
    assert source["inputs"] == [muls[0]["out"]]


def test_arange_and_a_value_spilled_for_both_branches_of_an_if(tmp_path):
    """pypto.arange(end) gives int32, a float bound fp32, ceil((end - start) / step)
    values; an on-chip value read in both branches of a symbolic if in a later root
    function goes through one workspace, usable in either branch."""
    path = write(tmp_path, """
        @pypto.jit
        def k(x: pypto.Tensor((16, 64)), seq: pypto.Tensor((2,), pypto.DT_INT32),
              y: pypto.Tensor((2, 16, 64)), i: pypto.Tensor((16,), pypto.DT_INT32),
              f: pypto.Tensor((4,))):
            pypto.set_vec_tile_shapes(16)
            i[:] = pypto.arange(16)
            f[:] = pypto.arange(0.0, 2.0, 0.5)
            pypto.set_vec_tile_shapes(16, 64)
            e = pypto.exp(x)
            for b in pypto.loop(2, name="L", idx_name="b"):
                if seq[b] > 3:
                    y[b, :, :] = e + 1.0
                else:
                    y[b, :, :] = e * 2.0
        """)
    text = kernel_text(trace_file(path, args={"seq.values": [1, 5]}), "t")
    cfg = yaml.safe_load(text)
    ranges = [s for s in cfg["body"] if isinstance(s, dict) and s.get("op") == "arange"]
    assert [(r["shape"], r["dtype"], r.get("step", 1.0)) for r in ranges] == \
        [([16], "int32", 1.0), ([4], "fp32", 0.5)]
    assert cfg["tensors"]["e_ws"]["role"] == "temporary"
    with pytest.raises(ConfigError, match=r"pypto.arange\(4, 4, 1\) is empty"):
        trace_file(write(tmp_path, """
            @pypto.jit
            def k(i: pypto.Tensor((4,), pypto.DT_INT32)):
                pypto.set_vec_tile_shapes(4)
                i[:] = pypto.arange(4, 4, 1)
            """))


def test_an_unknown_loop_keyword_is_noted_as_upstream_ignores_it(tmp_path):
    path = write(tmp_path, """
        @pypto.jit
        def k(x: pypto.Tensor((64, 64)), y: pypto.Tensor((64, 64))):
            pypto.set_vec_tile_shapes(16, 64)
            for i in pypto.loop(4, name="L", idx="i"):
                y[i * 16:(i + 1) * 16, :] = x[i * 16:(i + 1) * 16, :] + 1.0
        """)
    text = kernel_text(trace_file(path), "t")
    assert re.search(r"# note: pypto.loop keyword idx='i' at k.py:\d+ is ignored", text)
    assert yaml.safe_load(text)["body"][1]["loop"]["trip"] == 4


def _ops(path, **kw):
    body = yaml.safe_load(kernel_text(trace_file(path, **kw), "t"))["body"]
    return [s for s in body if isinstance(s, dict) and "op" in s]


def test_topk_is_a_sort_and_an_extraction_of_each_half(tmp_path, capsys):
    """pypto.topk(x, k) returns (values, indices): one topk (the k best (value, index)
    pairs of each row) and two topk_extract, values fp32 and indices int32, whether the
    kernel reads both or not (upstream writes both); the kernel simulates."""
    path = write(tmp_path, """
        @pypto.jit
        def k(x: pypto.Tensor((8, 160)), ids: pypto.Tensor((8, 8), pypto.DT_INT32)):
            pypto.set_vec_tile_shapes(8, 160)
            _, idx = pypto.topk(x, 8, -1, True)
            ids[:] = idx
        """)
    ops = _ops(path)
    sort = next(o for o in ops if o["op"] == "topk")
    assert sort["k"] == 8 and "largest" not in sort
    halves = [o for o in ops if o["op"] == "topk_extract"]
    assert [(h["part"], h["inputs"]) for h in halves] == \
        [("values", [sort["out"]]), ("indices", [sort["out"]])]
    written = next(o for o in ops if o["op"] == "assemble" and o["out"] == "ids")
    assert written["inputs"] == [halves[1]["out"]]
    out = tmp_path / "k.yaml"
    assert main(["import", f"{path}:k", "--out", str(out)]) == 0
    assert main(["simulate", str(out), "--out", str(tmp_path / "sim")]) == 0
    assert "leaf_tasks: 1" in capsys.readouterr().out
    for call, why in (("pypto.topk(x, 8, 0)", r"along dim 0 .*last dim only"),
                      ("pypto.topk(pypto.cast(x, pypto.DT_FP16), 8)", "MERGE_SORT sorts DT_FP32"),
                      ("pypto.topk(x, 8, algo=pypto.TopKAlgo.RADIX_SELECT)",
                       "A2/A3 run MERGE_SORT only")):
        bad = write(tmp_path, f"""
            @pypto.jit
            def k(x: pypto.Tensor((8, 160)), ids: pypto.Tensor((8, 8), pypto.DT_INT32)):
                pypto.set_vec_tile_shapes(8, 160)
                _, idx = {call}
                ids[:] = idx
            """)
        with pytest.raises(ConfigError, match=why):
            trace_file(bad)


def test_logical_not_of_numbers_scatter_into_an_on_chip_value_and_a_partly_valid_full(
        tmp_path):
    """logical_not of an fp32 tensor is x == 0 (upstream takes every numeric dtype); an
    in-place scatter_ into an on-chip value (a full) makes the scatter's result that value,
    with no assemble into it; a full's valid_shape is carried to the op."""
    path = write(tmp_path, """
        @pypto.jit
        def k(s: pypto.Tensor((8, 16)), i: pypto.Tensor((8, 2), pypto.DT_INT32),
              c: pypto.Tensor((8, 16))):
            pypto.set_vec_tile_shapes(8, 16)
            mask = pypto.full([8, 16], 0.0, pypto.DT_FP32, valid_shape=[4, 16])
            pypto.scatter_(mask, 1, i, 1.0)
            c[:] = pypto.where(pypto.logical_not(mask), 0.0, s)
        """)
    ops = _ops(path)
    names = [o["op"] for o in ops]
    assert "logical_not" not in names
    zero = next(o for o in ops if o["op"] == "eq")
    assert zero["scalar"] == 0.0
    scatter = next(o for o in ops if o["op"] == "scatter_elements")
    assert zero["inputs"] == [scatter["out"]]
    assert not [o for o in ops if o["op"] == "assemble" and o["out"] != "c"]
    assert next(o for o in ops if o["op"] == "full" and o["value"] == 0.0 and
                "valid_shape" in o)["valid_shape"] == [4, 16]


def test_expand_clone_keeps_a_valid_shape_and_symbolic_scalar_takes_a_bool(tmp_path):
    """glm_select_experts' forms: expand_clone(..., valid_shape=...) carries its valid region
    (the readers count it, as a view's), and `if pypto.symbolic_scalar(flag):` with a bool
    flag is the constant int it is."""
    path = write(tmp_path, """
        @pypto.jit
        def k(s: pypto.Tensor((8, 1)), c: pypto.Tensor((8, 16)), flag=True):
            pypto.set_vec_tile_shapes(8, 16)
            e = pypto.expand_clone(s, [8, 16], valid_shape=[5, 16])
            if pypto.symbolic_scalar(flag):
                c[:] = e + 1.0
            else:
                c[:] = e
        """)
    ops = _ops(path)
    assert next(o for o in ops if o["op"] == "expand")["valid_shape"] == [5, 16]
    assert [o["op"] for o in ops if o["op"] in ("add", "adds")] == ["add"]
    assert not any("cond" in o for o in ops)


def test_fillpad_is_the_constant_mode_of_one_or_two_dims(tmp_path):
    path = write(tmp_path, """
        @pypto.jit
        def k(x: pypto.Tensor((16, 64)), c: pypto.Tensor((16, 64))):
            pypto.set_vec_tile_shapes(16, 64)
            v = pypto.view(x, [16, 64], [0, 0], valid_shape=[3, 64])
            c[:] = pypto.fillpad(v, "constant", -1.0)
        """)
    pad = next(o for o in _ops(path) if o["op"] == "fillpad")
    assert pad["value"] == -1.0
    bad = write(tmp_path, """
        @pypto.jit
        def k(x: pypto.Tensor((16, 64)), c: pypto.Tensor((16, 64))):
            pypto.set_vec_tile_shapes(16, 64)
            c[:] = pypto.fillpad(x, "reflect")
        """)
    with pytest.raises(ConfigError, match="'constant' only"):
        trace_file(bad)


def test_a_tensor_renamed_in_place_in_the_branches_of_a_symbolic_if(tmp_path):
    """Upstream's gdr kernel renames its running state in both branches of an is_loop_end
    if (last_state[:] = cur_state): each branch starts from the value before the if, and
    after it the state is one value that either branch wrote.  A variable the branches bind
    to clashing values (two shapes) is an error only where it is used after the if."""
    path = write(tmp_path, """
        @pypto.jit
        def k(x: pypto.Tensor((2, 16, 64)), y: pypto.Tensor((2, 16, 64))):
            pypto.set_vec_tile_shapes(16, 64)
            state = x[0, :, :] + 0.0
            for i in pypto.loop(2, name="L", idx_name="i"):
                if pypto.is_loop_end(i):
                    t = state * 2.0
                    state[:] = t + 1.0
                    scratch = pypto.full([16, 32], 0.0, pypto.DT_FP32)
                else:
                    t = state * 3.0
                    state[:] = t - 1.0
                    scratch = pypto.full([16, 64], 0.0, pypto.DT_FP32)
                y[i, :, :] = state
        """)
    body = yaml.safe_load(kernel_text(trace_file(path), "t"))["body"]
    ops = [s for s in next(s for s in body if "loop" in s)["body"] if "op" in s]
    muls = [o for o in ops if o["op"] == "mul"]
    # both branches multiply the state as it was before the if
    assert len(muls) == 2 and muls[0]["inputs"] == muls[1]["inputs"]
    assert muls[0]["cond"] != muls[1]["cond"]
    new = [o for o in ops if o["op"] in ("add", "sub") and o.get("scalar") == 1.0]
    assert len(new) == 2 and new[0]["out"] == new[1]["out"]      # one name, either branch
    written = next(o for o in ops if o["op"] == "reshape" and "cond" not in o)
    assert written["inputs"] == [new[0]["out"]]
    used = write(tmp_path, """
        @pypto.jit
        def k(x: pypto.Tensor((16, 64)), y: pypto.Tensor((2, 16, 64))):
            pypto.set_vec_tile_shapes(16, 64)
            for i in pypto.loop(2, name="L", idx_name="i"):
                if pypto.is_loop_end(i):
                    scratch = pypto.full([16, 32], 0.0, pypto.DT_FP32)
                else:
                    scratch = pypto.full([16, 64], 0.0, pypto.DT_FP32)
                y[i, :, :] = scratch + x
        """)
    with pytest.raises(ConfigError, match=r"'scratch' has shape \[16, 32\] in one branch"):
        trace_file(used)


def test_a_state_renamed_in_a_loop_body_reaches_the_next_iteration(tmp_path):
    """state[:] = f(state) in a pypto.loop body (upstream's GDR carries last_state from one
    chunk to the next so): the state already travels between root calls through its
    workspace, so the new value is written there too, and each iteration's leaf task waits
    for the one before."""
    path = write(tmp_path, """
        @pypto.jit
        def k(x: pypto.Tensor((2, 16, 64)), y: pypto.Tensor((4, 16, 64))):
            pypto.set_vec_tile_shapes(16, 64)
            state = x[0, :, :] + 0.0
            for i in pypto.loop(4, name="L", idx_name="i"):
                t = state * 2.0
                state[:] = t + 1.0
                y[i, :, :] = state
        """)
    body = yaml.safe_load(kernel_text(trace_file(path), "t"))["body"]
    loop = next(s for s in body if "loop" in s)["body"]
    writes = [o for o in loop if o.get("op") == "assemble" and o["out"] == "state_ws"]
    assert len(writes) == 1
    out = tmp_path / "k.yaml"
    assert main(["import", f"{path}:k", "--out", str(out)]) == 0
    from simcore.spec.kernel import load_kernel
    from simcore.spec.hardware import load_hardware
    from simcore.compiler import compile_kernel
    from simcore.machine import simulate
    kernel = load_kernel(out)
    program = compile_kernel(kernel, load_hardware("dav_2201"))
    timeline = simulate(load_hardware("dav_2201"), program, kernel.options.runtime_options)
    order = timeline.task_start.argsort()
    starts, ends = timeline.task_start[order], timeline.task_end[order]
    assert program.leaf_tasks == 5 and (starts[1:] >= ends[:-1]).all()   # one chain


def test_a_marker_annotation_bounds_the_rank_from_below_as_upstream_checks_it(tmp_path):
    """Upstream's parser refuses a tensor with fewer dims than an annotation of STATIC /
    DYNAMIC markers, not one with more (frontend/parser/entry.py at 883e7dfb): a kernel
    annotated with two markers takes a (1, 1, 512) gamma, its extra dim static; fewer dims,
    or a dim an int annotation fixes given otherwise, stop with the argument named."""
    path = write(tmp_path, """
        @pypto.jit
        def scale(g: pypto.Tensor([pypto.STATIC, pypto.STATIC], pypto.DT_FP32),
                  out: pypto.Tensor([pypto.STATIC, pypto.STATIC], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(1, 1, 512)
            out[:] = g + g
        """)
    traced = trace_file(path, args={"g": [1, 1, 512], "out": [1, 1, 512]})
    kernel = yaml.safe_load(kernel_text(traced, "t"))
    assert kernel["tensors"]["g"]["shape"] == [1, 1, 512]
    with pytest.raises(ConfigError, match=r"--arg g=\[512\].*has 2 dims \(at least\)"):
        trace_file(path, args={"g": [512], "out": [1, 512]})
    fixed = write(tmp_path, """
        @pypto.jit
        def scale(g: pypto.Tensor([4, pypto.STATIC], pypto.DT_FP32),
                  out: pypto.Tensor([4, pypto.STATIC], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(4, 512)
            out[:] = g + g
        """)
    with pytest.raises(ConfigError, match=r"--arg g=\[8, 512\]: dim 0 is 8.*fixes it at 4"):
        trace_file(fixed, args={"g": [8, 512], "out": [4, 512]})


CARRY_HEAD = """\
@pypto.frontend.jit
def k(x: pypto.Tensor([4, 16, 64], pypto.DT_FP32), y: pypto.Tensor([16, 64], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(16, 64)
    acc = pypto.tensor([16, 64], pypto.DT_FP32, "acc")
    for i in pypto.loop(4, name="L", idx_name="i"):
        v = pypto.reshape(x[i:i + 1, :, :], [16, 64]) * 2.0
"""
CARRY = "import pypto\n\n\n" + CARRY_HEAD + """\
        if pypto.is_loop_begin(i):
            acc[:] = pypto.tensor([16, 64], pypto.DT_FP32, "acc_init")
            acc[:] = v
        else:
            t = acc + v
            if pypto.is_loop_end(i):
                y[:] = t
            else:
                acc[:] = t
"""


@pytest.mark.parametrize("split", [False, True])
def test_a_carry_reset_with_a_fresh_tensor_on_the_first_step_still_carries(tmp_path, split):
    """Upstream's glm_attention resets its running output on the first step with
    ``acc[:] = pypto.tensor(...)`` and later steps read ``acc``: the first step's write must
    reach the second step, so it goes to ``acc`` itself, and nothing is dead; the same when
    the statement spans two lines."""
    from simcore.compiler import compile_kernel
    from simcore.spec.hardware import load_hardware
    from simcore.spec.kernel import Kernel
    path = tmp_path / "carry.py"
    text = CARRY.replace('acc[:] = pypto.tensor([16, 64], pypto.DT_FP32, "acc_init")',
                         'acc[:] = (\n                pypto.tensor([16, 64], pypto.DT_FP32, '
                         '"acc_init"))') if split else CARRY
    assert split == (text != CARRY)
    path.write_text(text)
    data = config(path)
    ops = [s for s in data["body"][1]["body"] if "op" in s]
    first = [o for o in ops if o.get("cond") == "i == 0"]
    assert len(first) == 1 and first[0]["op"] == "rename" and first[0]["out"] == "acc"
    assert any(o["op"] == "add" and "acc" in o["inputs"] for o in ops)
    program = compile_kernel(Kernel.model_validate(data), load_hardware("dav_2201"))
    assert "dead_ops" not in program.info


def test_as_variable_is_accepted_and_changes_nothing(tmp_path):
    """SymbolicScalar.as_variable marks a scalar as a run-time variable upstream; the trace
    keeps such a value symbolic anyway."""
    body = """\
import pypto


@pypto.frontend.jit
def k(seq: pypto.Tensor([2], pypto.DT_INT32), y: pypto.Tensor([2, 64], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(1, 64)
    for b in pypto.loop(2, name="L", idx_name="b"):
        n = (seq[b] - 1).max(0).min(64)
        %s
        y[b:b + 1, :] = pypto.full([1, 64], 1.0, pypto.DT_FP32, valid_shape=[1, n])
"""
    with_call, without = tmp_path / "a.py", tmp_path / "b.py"
    with_call.write_text(body % "n.as_variable()")
    without.write_text(body % "pass")
    args = {"seq.values": [3, 70]}
    strip = lambda d: {k: v for k, v in d.items() if k != "body"} | {
        "ops": [{k: v for k, v in s.items() if k != "src"} for s in d["body"][1]["body"]]}
    assert strip(config(with_call, args=args)) == strip(config(without, args=args))


ARCH_BRANCH = """\
import pypto


@pypto.jit
def k(x: pypto.Tensor((64, 64)), y: pypto.Tensor((64, 64))):
    if pypto.platform.npuarch == 'DAV_3510':
        pypto.set_vec_tile_shapes(64, 64)
    else:
        pypto.set_vec_tile_shapes(32, 64)
    y[:] = x + x
"""


def test_a_kernel_branching_on_the_chip_keeps_the_named_chips_branch(tmp_path, capsys):
    """pypto.platform.npuarch answers --arch; without it the import stops and says so."""
    path = tmp_path / "arch.py"
    path.write_text(ARCH_BRANCH)
    tiles = {}
    for arch in ("DAV_2201", "DAV_3510"):
        out = tmp_path / f"{arch}.yaml"
        assert main(["import", f"{path}:k", "--arch", arch.lower(), "--out", str(out)]) == 0
        text = out.read_text()
        assert f"--arch {arch}" in text.splitlines()[1]          # the re-import command
        tiles[arch] = yaml.safe_load(text)["tiles"]
    assert tiles["DAV_2201"] != tiles["DAV_3510"]
    assert [64, 64] in tiles["DAV_3510"].values() and [32, 64] in tiles["DAV_2201"].values()
    capsys.readouterr()
    assert main(["import", f"{path}:k", "--out", str(tmp_path / "none.yaml")]) == 2
    assert "--arch" in capsys.readouterr().err
    assert main(["import", f"{path}:k", "--arch", "dav_9999",
                 "--out", str(tmp_path / "bad.yaml")]) == 2
    assert "DAV_2201" in capsys.readouterr().err


@pytest.mark.parametrize("use", [
    "pypto.assemble(acc, [0, 0], y)",                                # GM into GM: a move
    "top = pypto.view(acc, [8, 64], [0, 0]); "                       # a view written into
    "pypto.assemble(v[0:8, :] + 1.0, [0, 0], top); y[:] = acc + 1.0"])
def test_a_renamed_tensor_used_as_gm_data_is_stored_first(tmp_path, use):
    """x[:] = v renames x (the kernel op rename), but an op that takes x as GM data (a move
    into another tensor, a view an assemble writes into) reads x's memory: the value is
    stored there first, and the kernel compiles."""
    from simcore.compiler import compile_kernel
    from simcore.spec.hardware import load_hardware
    from simcore.spec.kernel import Kernel
    path = tmp_path / "k.py"
    path.write_text("import pypto\n\n\n" + CARRY_HEAD + "        acc[:] = v\n        "
                    + use.replace("; ", "\n        ") + "\n")
    data = config(path)
    assert any(o.get("op") == "rename" for o in data["body"][1]["body"])
    program = compile_kernel(Kernel.model_validate(data), load_hardware("dav_2201"))
    assert program.root_calls == 4 and program.leaf_tasks > 0


def test_a_written_tensor_moved_into_another_is_renamed_not_dropped(tmp_path):
    """Only fresh memory leaves the target's own buffer standing: a pypto.tensor some op
    has written (here inside a helper, whose ops carry the caller's line) is data, and
    moving it renames, so later reads read it."""
    path = tmp_path / "mv.py"
    path.write_text("""\
import pypto


def filled(t, v):
    t[:] = v
    return t


@pypto.jit
def k(x: pypto.Tensor((32, 32)), y: pypto.Tensor((32, 32))):
    pypto.set_vec_tile_shapes(32, 32)
    acc = pypto.tensor([32, 32], pypto.DT_FP32, "acc")
    acc[:] = filled(pypto.tensor([32, 32], pypto.DT_FP32, "t"), x * 2.0)
    y[:] = acc + 1.0
""")
    ops = [s for s in config(path)["body"] if "op" in s]
    written = {o["out"] for o in ops if o["op"] in ("assemble", "rename")}
    reads = {name for o in ops if o["op"] == "add" for name in o["inputs"]}
    assert reads <= written | {"x"}, (reads, written)


LOOP_WITH_IF = """\
    for i in pypto.loop(2, name="L", idx_name="i"):
        if pypto.cond(i < 1):
            c[i * 16:(i + 1) * 16, :] = a + a
        else:
            c[i * 16:(i + 1) * 16, :] = a * a
"""
KERNEL = """\
@pypto.frontend.jit()
def k(a: pypto.Tensor([16, 16], pypto.DT_FP32), c: pypto.Tensor([32, 16], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(16, 16)
"""


def test_an_if_on_a_loop_index_in_a_function_the_kernel_calls_records_both_branches(tmp_path):
    """Upstream's pypto.cond records both branches of an if wherever it stands, so model
    files put their loops and ifs in a compute function the jit kernel calls.  The tracer
    rewrites such a function as it does the kernel's body, and traces again: the config is
    the one of the same loop written in the kernel."""
    helper = tmp_path / "helper.py"
    helper.write_text(f"import pypto\n\n\ndef body(a, c):\n{LOOP_WITH_IF}\n\n{KERNEL}"
                      f"    body(a, c)\n")
    inline = tmp_path / "inline.py"
    inline.write_text(f"import pypto\n\n\n{KERNEL}{LOOP_WITH_IF}")
    def ops(path):         # each op with its condition; 'src' names the file and line
        loop = next(s for s in config(path)["body"] if "loop" in s)
        return [{k: v for k, v in op.items() if k != "src"} for op in loop["body"]]

    assert ops(helper) == ops(inline)
    assert {(o["op"], o.get("cond")) for o in ops(helper) if o["op"] != "assemble"} == {
        ("add", "i < 1"), ("mul", "not (i < 1)")}


def test_a_helper_if_is_found_even_under_a_catch_all_except(tmp_path):
    """A kernel that wraps its call in ``try: ... except:`` catches the tracer's signal to
    rewrite the helper, and passes or raises something else; the tracer still rewrites the
    helper and traces again, so both branches are recorded as without the try."""
    plain = tmp_path / "plain.py"
    plain.write_text(f"import pypto\n\n\ndef body(a, c):\n{LOOP_WITH_IF}\n\n{KERNEL}"
                     f"    body(a, c)\n")
    def ops(path):
        loop = next(s for s in config(path)["body"] if "loop" in s)
        return [(o["op"], o.get("cond")) for o in loop["body"] if "op" in o]

    # the kernel swallows the signal, or raises something else in its place
    for handler in ("pass", "raise RuntimeError('body failed')"):
        caught = tmp_path / "caught.py"
        caught.write_text(f"import pypto\n\n\ndef body(a, c):\n{LOOP_WITH_IF}\n\n{KERNEL}"
                          f"    try:\n        body(a, c)\n    except:  # noqa: E722\n"
                          f"        {handler}\n")
        assert ops(caught) == ops(plain), handler
    assert ("mul", "not (i < 1)") in ops(plain)


def test_a_kernel_traced_again_for_its_helper_keeps_its_arguments(tmp_path):
    """The trace after a helper's rewrite needs every --arg again (the first trace used
    them up: upstream's sparse compress attention stopped on its first tensor's shape)."""
    helper = tmp_path / "helper.py"
    helper.write_text("import pypto\n\n\ndef body(a, c):\n" + LOOP_WITH_IF + "\n\n"
                      "@pypto.frontend.jit()\n"
                      "def k(a: pypto.Tensor([pypto.DYNAMIC, pypto.STATIC], pypto.DT_FP32),\n"
                      "      c: pypto.Tensor([32, 16], pypto.DT_FP32)):\n"
                      "    pypto.set_vec_tile_shapes(16, 16)\n    body(a, c)\n")
    got = config(helper, "k", {"a": [16, 16]})
    assert got["params"] == {"a_0": 16} and got["tensors"]["a"]["shape"] == ["a_0", 16]


def test_an_if_on_a_loop_index_in_a_method_records_both_branches_and_the_file_is_restored(
        tmp_path):
    """A method is swapped through its class (setattr), so the retrace calls the rewrite,
    and after the trace the class holds its own function again."""
    path = tmp_path / "method.py"
    path.write_text(f"import pypto\n\n\nclass H:\n    def body(self, a, c):\n"
                    f"{textwrap.indent(LOOP_WITH_IF, '    ')}\n\n{KERNEL}    H().body(a, c)\n")
    ops = [o for o in next(s for s in config(path)["body"] if "loop" in s)["body"]]
    assert {(o["op"], o.get("cond")) for o in ops if o["op"] != "assemble"} == {
        ("add", "i < 1"), ("mul", "not (i < 1)")}


@pytest.mark.parametrize("helper, call", [
    ("class H:\n    @staticmethod\n    def body(a, c):\n{loop}", "H.body(a, c)"),
    ("class H:\n    @classmethod\n    def body(cls, a, c):\n{loop}", "H.body(a, c)"),
    ("import functools\n\n\ndef body(n, a, c):\n{plain}\n\nbody2 = functools.partial(body, 0)",
     "body2(a, c)")])
def test_an_if_in_a_staticmethod_classmethod_or_partial_records_both_branches(
        tmp_path, helper, call):
    """The wrapper holds its function where no attribute swap reaches, so the tracer puts a
    new wrapper of the rewrite where the old one is held."""
    path = tmp_path / "wrapped.py"
    path.write_text("import pypto\n\n\n" + helper.format(
        loop=textwrap.indent(LOOP_WITH_IF, "    "), plain=LOOP_WITH_IF)
        + f"\n\n{KERNEL}    {call}\n")
    ops = [o for o in next(s for s in config(path)["body"] if "loop" in s)["body"]]
    assert {(o["op"], o.get("cond")) for o in ops if o["op"] != "assemble"} == {
        ("add", "i < 1"), ("mul", "not (i < 1)")}


def test_an_if_on_a_loop_index_in_a_def_inside_a_def_names_that_function(tmp_path):
    """A def inside another def is made anew on every call, so its source cannot be swapped
    for a rewrite: the error names the function and line, not 'outside an if statement'."""
    path = tmp_path / "nested.py"
    path.write_text(f"import pypto\n\n\ndef make():\n    def body(a, c):\n"
                    f"{textwrap.indent(LOOP_WITH_IF, '    ')}    return body\n\n\n{KERNEL}"
                    f"    make()(a, c)\n")
    with pytest.raises(ConfigError) as err:
        config(path)
    text = str(err.value)
    assert "body()" in text and "nested.py:7" in text and "outside an if" not in text


def test_a_tensor_moved_before_it_is_written_is_renamed(tmp_path):
    """acc[:] = t, then t written in the same step: later reads of acc read t's data, so
    the move renames (only a tensor made by the move's own statement is fresh memory)."""
    path = tmp_path / "carried.py"
    path.write_text("""\
import pypto


@pypto.frontend.jit
def k(x: pypto.Tensor([4, 16, 64], pypto.DT_FP32), y: pypto.Tensor([16, 64], pypto.DT_FP32)):
    pypto.set_vec_tile_shapes(16, 64)
    t = pypto.tensor([16, 64], pypto.DT_FP32, "t")
    acc = pypto.tensor([16, 64], pypto.DT_FP32, "acc")
    for i in pypto.loop(4, name="L", idx_name="i"):
        acc[:] = t
        t[:] = acc + pypto.reshape(x[i:i + 1, :, :], [16, 64])
    y[:] = t
""")
    ops = [s for s in config(path)["body"][1]["body"] if "op" in s]
    add = next(o for o in ops if o["op"] == "add")
    assert "acc" not in add["inputs"] and "t" in add["inputs"]


def test_arch_answers_an_imported_npuarch_too(tmp_path):
    path = tmp_path / "arch2.py"
    path.write_text(ARCH_BRANCH.replace("import pypto\n", "import pypto\nfrom pypto.platform "
                                        "import npuarch\n").replace(
        "pypto.platform.npuarch", "npuarch"))
    out = tmp_path / "a.yaml"
    assert main(["import", f"{path}:k", "--arch", "DAV_3510", "--out", str(out)]) == 0
    assert [64, 64] in yaml.safe_load(out.read_text())["tiles"].values()


GATHER_IN_UB = """\
import pypto
from pypto.experimental import gather_in_ub


@pypto.frontend.jit
def sparse_rows(kv: pypto.Tensor([256, 128], pypto.DT_FP16),
                idx: pypto.Tensor([2, 32], pypto.DT_INT32),
                table: pypto.Tensor([2, 8], pypto.DT_INT32),
                out: pypto.Tensor([64, 128], pypto.DT_FP16)):
    pypto.set_vec_tile_shapes(16, 128)
    for b in range(2):
        rows = gather_in_ub(kv, idx[b:b + 1, :], table[b:b + 1, :], 16, -2)
        out[b * 32:(b + 1) * 32, :] = rows
"""


def test_gather_in_ub_imports_as_the_kernel_language_op(tmp_path):
    from simcore.compiler import compile_kernel
    from simcore.spec.hardware import load_hardware
    from simcore.spec.kernel import Kernel

    path = tmp_path / "sparse_rows.py"
    path.write_text(GATHER_IN_UB)
    values = {"idx": [list(range(32)), list(range(31, -1, -1))],
              "table": [list(range(8)), list(range(8, 16))]}
    got = config(path, "sparse_rows", {f"{n}.values": v for n, v in values.items()})
    gathers = [s for s in got["body"] if s.get("op") == "gather_in_ub"]
    assert [g["block_size"] for g in gathers] == [16, 16] and gathers[0]["axis"] == -2
    # the leaf tasks read the data, not the control flow: kept, and fetched by no AICPU
    assert got["values"] == values
    assert got["tensors"]["idx"]["control_flow_input"] is False
    # the same kernel written in the kernel language compiles to the same program
    views = lambda n, b, cols: {"op": "view", "inputs": [n], "out": f"{n}{b}",
                                "shape": [1, cols], "offsets": [b, 0]}
    body = [{"set_vec_tile_shapes": [16, 128]}]
    for b in range(2):
        body += [views("idx", b, 32), views("table", b, 8),
                 {"op": "gather_in_ub", "inputs": ["kv", f"idx{b}", f"table{b}"],
                  "out": f"g{b}", "block_size": 16, "axis": -2},
                 {"op": "assemble", "inputs": [f"g{b}"], "out": "out", "offsets": [b * 32, 0]}]
    written = Kernel.model_validate({
        "name": "sparse_rows", "body": body, "values": values,
        "tensors": {n: {**got["tensors"][n]} for n in got["tensors"]}})
    imported = Kernel.model_validate(got)
    hw = load_hardware("dav_2201")
    a, b = compile_kernel(imported, hw), compile_kernel(written, hw)
    assert a.leaf_tasks == b.leaf_tasks == 4
    for column in ("mte2_bytes", "mte2_bursts", "mte2_loads", "scalar_elements"):
        assert np.array_equal(getattr(a.work, column), getattr(b.work, column))
    assert np.array_equal(a.regions.lines, b.regions.lines)


def test_gather_in_ub_refuses_what_upstream_does_not_take(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(GATHER_IN_UB.replace("16, -2)", "16, 0)"))
    with pytest.raises(ConfigError, match="gather_in_ub along axis 0.*axis -2"):
        trace_file(path, "sparse_rows", None, {})


TRANSPOSED_BMM = """\
import pypto


@pypto.frontend.jit
def q_nope(q: pypto.Tensor([128, 4, 64], pypto.DT_BF16),
           w: pypto.Tensor([4, 64, 256], pypto.DT_BF16),
           out: pypto.Tensor([128, 4, 256], pypto.DT_BF16)):
    pypto.set_cube_tile_shapes([128, 128], [64, 64], [256, 256])
    c = pypto.experimental.transposed_batchmatmul(q, w, pypto.DT_BF16)
    pypto.set_vec_tile_shapes(128, 1, 256)
    pypto.assemble(c, [0, 0, 0], out)
"""


def test_transposed_batchmatmul_imports_as_a_matmul_of_strided_batches(tmp_path):
    """DeepSeek-V3.2's MLA prolog multiplies each head's rows of q (tokens, heads, d) by that
    head's weight with pypto.experimental.transposed_batchmatmul: the import writes the
    kernel language's matmul with ``transposed_batch``, one cube tile per head."""
    from simcore.compiler import compile_kernel
    from simcore.spec.hardware import load_hardware
    from simcore.spec.kernel import Kernel

    path = tmp_path / "q_nope.py"
    path.write_text(TRANSPOSED_BMM)
    got = config(path, "q_nope", {})
    (mm,) = [s for s in got["body"] if s.get("op") == "matmul"]
    assert mm["transposed_batch"] is True and mm["dtype"] == "bf16"
    program = compile_kernel(Kernel.model_validate(got), load_hardware("dav_2201"))
    assert program.leaf_tasks == 4
    bad = tmp_path / "bad.py"
    bad.write_text(TRANSPOSED_BMM.replace("[4, 64, 256]", "[2, 64, 256]"))
    with pytest.raises(ConfigError, match="transposed_batchmatmul of shapes"):
        config(bad, "q_nope", {})
