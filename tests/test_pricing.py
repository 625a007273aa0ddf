"""The machine prices hardware-independent work: one compiled Program, any chip's rates."""
import numpy as np
import pytest

import pipeline.calibrate as calibrate
from conftest import KERNELS
from pipeline.calibrate import Calibration, Problem, with_values
from pipeline.runner import resolve_kernel
from simcore.compiler import compile_kernel
from simcore.compiler.work import CubeWork, VectorWork, Work
from simcore.machine import simulate
from simcore.machine.costs import pipe_cycles, static_pipe_us
from simcore.spec.errors import ConfigError
from simcore.spec.hardware import load_hardware

HW = load_hardware("dav_2201")


def _compiled(name):
    kernel = resolve_kernel(KERNELS / f"{name}.yaml", {})
    return kernel, compile_kernel(kernel, HW)


def _times(hw, kernel, program) -> tuple[float, float]:
    """(kernel time, busy core time) in us."""
    tl = simulate(hw, program, kernel.options.runtime_options)
    return tl.kernel_us, float((tl.task_end - tl.task_start).sum())


def test_vector_and_cube_rates_change_a_compiled_program_without_recompiling():
    # sqrt_cast's few large tiles keep its cores, not the schedule threads, the limit
    # (softmax's 3584 tiny tasks are bound by dispatch and would hide any vector rate)
    kernel, program = _compiled("sqrt_cast")
    base = _times(HW, kernel, program)
    sqrt = HW.pipes.vector["sqrt"]
    slow_sqrt = with_values(HW, {"pipes.vector.sqrt.bytes_per_cycle": sqrt.bytes_per_cycle / 50,
                                 "pipes.vector.sqrt.fixed_cycles": sqrt.fixed_cycles * 50})
    slow = _times(slow_sqrt, kernel, program)
    assert slow[0] > 1.5 * base[0] and slow[1] > base[1]
    kernel, program = _compiled("matmul_fp16")
    base = _times(HW, kernel, program)
    slow_cube = with_values(HW, {"pipes.cube.cycles_per_fractal.default": 16.0})
    slow = _times(slow_cube, kernel, program)
    assert slow[0] > base[0] and slow[1] > base[1]
    fast_mte1 = with_values(HW, {"pipes.mte1.bytes_per_cycle": 1000.0})
    assert static_pipe_us(fast_mte1, program)["mte1"].sum() < \
        static_pipe_us(HW, program)["mte1"].sum()


def _work(vector: VectorWork, cube: CubeWork, n: int, **columns) -> Work:
    return Work.from_columns(vector, cube, n,
                             **{k: np.asarray(v, float) for k, v in columns.items()})


def test_every_op_kind_and_dtype_is_priced_at_its_rate_scaled_by_valid_tiles():
    # task 0: two add tiles of 4 rows x 256 B (one half valid) and an unlisted kind; task 1:
    # an fp32 and an int8 matmul tile with two k steps
    vector = VectorWork(("add", "warp"), np.array([0, 0]), np.array([0, 1]),
                        np.array([1536.0, 256.0]), np.array([1.5, 1.0]),
                        rows=np.array([6.0, 1.0]), row_bytes=np.array([256.0, 256.0]))
    cube = CubeWork(("fp32", "int8"), np.array([1, 1]), np.array([0, 1]),
                    np.array([8.0, 8.0]), np.array([1.0, 1.0]))
    work = _work(vector, cube, 2, mte1_bytes=[0, 4096], mte1_steps=[0, 2], fixp_bytes=[0, 512],
                 fixp_tiles=[0, 2], mte3_bytes=[600, 0])
    got = pipe_cycles(HW, work)
    p = HW.pipes
    add, default = p.vector["add"], p.vector["default"]
    issue = p.vector_issue.issue_cycles   # one 256-B repeat per row, one instruction per tile
    assert got["vector"][0] == pytest.approx(1.5 * (add.fixed_cycles + issue)
                                             + 6 * 256 / add.bytes_per_cycle
                                             + default.fixed_cycles + issue
                                             + 256 / default.bytes_per_cycle)
    per = p.cube.cycles_per_fractal
    assert got["cube"][1] == pytest.approx(2 * p.cube.fixed_cycles + 8 * per["fp32"]
                                           + 8 * per["int8"])
    assert got["mte1"][1] == pytest.approx(2 * p.mte1.fixed_cycles
                                           + 4096 / p.mte1.bytes_per_cycle)
    assert got["fixp"][1] == pytest.approx(2 * p.fixp.fixed_cycles + 512 / p.fixp.bytes_per_cycle)
    # MTE3 pays its latency once per task that writes, nothing for one that does not
    assert got["mte3"].tolist() == pytest.approx([p.mte3.fixed_cycles + 600 / p.mte3.bytes_per_cycle,
                                                  0.0])
    assert got["vector"][1] == got["cube"][0] == got["mte1"][0] == 0.0


def test_calibration_never_recompiles(monkeypatch):
    # skinny_matmul_rewrite's stages are cube-bound, so the cube rate moves every one of
    # them (glm_attention's stitch_128 is bound by its schedule threads: no vector rate
    # moves it)
    path = "pipes.cube.cycles_per_fractal.default"
    cal = Calibration.model_validate({
        "studies": [{"study": "skinny_matmul_rewrite"}], "hardware": "dav_2201",
        "parameters": [{"path": path, "prior": 1.0,
                        "source": "docs/sources.md section 1", "low": 0.5, "high": 32.0,
                        "physical_bound": "a test range around one fractal per cycle"}]})
    problem = Problem(cal, KERNELS.parent)
    compiles = []
    monkeypatch.setattr(calibrate, "compile_kernel",
                        lambda *a: compiles.append(a) or pytest.fail("recompiled"))
    slow = problem.measure({path: 32.0})
    fast = problem.measure({path: 1.0})
    assert not compiles
    assert all(s["kernel_us"] > f["kernel_us"] for s, f in zip(slow, fast))


@pytest.mark.parametrize("path", ["buffers.ub", "cores.aic"])
def test_a_mapping_fact_is_not_a_free_parameter(path):
    cal = Calibration.model_validate({
        "studies": [{"study": "glm_attention_stitch"}], "hardware": "dav_2201",
        "parameters": [{"path": path, "prior": 1000.0, "source": "test", "low": 1.0,
                        "high": 1e6, "physical_bound": "test"}]})
    with pytest.raises(ConfigError, match=path.replace(".", r"\.")):
        Problem(cal, KERNELS.parent)
