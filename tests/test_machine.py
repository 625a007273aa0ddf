"""The first machine model: deterministic, causal, and moved by the stitch knob."""
import numpy as np

from simcore.compiler import compile_kernel
from simcore.machine import Machine, simulate
from simcore.spec.hardware import load_hardware

from pipeline.runner import resolve_kernel

from conftest import KERNELS

HW = load_hardware("dav_2201")


def run(msa_path, hw=HW, **sets):
    kernel = resolve_kernel(msa_path, sets)
    program = compile_kernel(kernel, hw)
    return program, simulate(hw, program, kernel.options.runtime_options)


def test_same_input_same_timeline(msa_path):
    _, a = run(msa_path)
    _, b = run(msa_path)
    assert np.array_equal(a.task_start, b.task_start) and np.array_equal(a.task_core, b.task_core)


def test_tasks_run_inside_their_dev_task_and_cores_never_overlap(msa_path):
    program, tl = run(msa_path, **{"runtime_options.stitch_function_max_num": 16})
    dev = program.task_dev_task
    assert np.all(tl.task_start >= tl.dev_start[dev])
    assert np.all(tl.task_end <= tl.dev_end[dev])
    assert np.all(tl.dev_start[1:] >= tl.dev_end[:-1])          # dev tasks are barriers
    assert np.all(tl.dev_start >= tl.dev_build_end)             # built before they run
    for core in np.unique(tl.task_core):
        idx = np.flatnonzero(tl.task_core == core)
        idx = idx[np.argsort(tl.task_start[idx])]
        assert np.all(tl.task_start[idx][1:] >= tl.task_end[idx][:-1])
    assert np.all(tl.task_core >= HW.cores.aic)                 # vector work on AIV cores


def test_larger_stitch_cuts_hand_overs(msa_path):
    _, one = run(msa_path, **{"runtime_options.stitch_function_max_num": 1})
    _, many = run(msa_path, **{"runtime_options.stitch_function_max_num": 64})
    assert many.kernel_us < one.kernel_us
    assert many.e2e_us < one.e2e_us
    assert one.e2e_us >= one.kernel_us and many.e2e_us >= many.kernel_us


def test_dispatch_cost_is_a_mechanism(msa_path):
    cheap = HW.model_copy(update={"aicpu": HW.aicpu.model_copy(update={"dispatch_us": 0.01})})
    dear = HW.model_copy(update={"aicpu": HW.aicpu.model_copy(update={"dispatch_us": 1.0})})
    _, a = run(msa_path, hw=cheap)
    _, b = run(msa_path, hw=dear)
    assert b.kernel_us > a.kernel_us


def test_one_machine_run_twice_gives_the_same_figures():
    """A second run starts from idle threads, an empty L2 and unresolved edges like the
    first, on a kernel with edges, L2 reuse and several dev tasks."""
    kernel = resolve_kernel(KERNELS / "glm_attention.yaml", {})
    program = compile_kernel(kernel, HW)
    machine = Machine(HW, program, kernel.options.runtime_options)
    first = machine.run()
    kept = (first.task_start.copy(), first.task_l2_bytes.copy(), [th.rcv[:] for th in first.sched])
    second = machine.run()
    assert program.dev_tasks > 1 and program.edge_src.size > 0 and kept[1].sum() > 0
    assert second.kernel_us == first.kernel_us and second.e2e_us == first.e2e_us
    for tl in (first, second):
        assert np.array_equal(tl.task_start, kept[0])
        assert np.array_equal(tl.task_l2_bytes, kept[1])
        assert [th.rcv for th in tl.sched] == kept[2]
