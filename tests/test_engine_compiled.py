"""The compiled engine against its own Python source, the reference.

simcore/machine/engine.py, l2.py and costs.py are compiled by Cython (setup.py, typed by
the .pxd files beside them) and also run as plain Python (simcore.machine.reference).
Every stage of every study in configs/studies, under every device_sched_mode, must give
the same Timeline through both: every field, floats bit for bit.

Without the compiled module these tests skip and say why; with CI=true a missing compiled
module is a failure, so a broken build cannot pass as skipped.
"""
import dataclasses
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import REPO
from pipeline.runner import resolve_kernel
from simcore.compiler import compile_kernel
from simcore.machine import engine as ENGINE
from simcore.machine.reference import is_compiled, reference
from simcore.spec.hardware import load_hardware
from simcore.spec.study import find_config, load_study

CONFIGS = REPO / "configs"
STUDIES = sorted(p.stem for p in (CONFIGS / "studies").glob("*.yaml"))
COMPILED = is_compiled(ENGINE)
IN_CI = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")
NOT_BUILT = ("the compiled engine is not built (simcore/machine/engine.py runs as Python: "
             "pip install -e . failed to compile it, or PTOLAB_ENGINE=python is set)")
needs_compiled = pytest.mark.skipif(not COMPILED, reason=NOT_BUILT)

def test_the_compiled_engine_is_built_in_ci():
    if not COMPILED:
        if IN_CI and os.environ.get("PTOLAB_ENGINE", "").lower() != "python":
            pytest.fail(NOT_BUILT + "; CI must build it")
        pytest.skip(NOT_BUILT)
    for name in ("engine", "l2", "costs"):
        module = sys.modules[f"simcore.machine.{name}"]
        assert is_compiled(module), f"simcore.machine.{name} runs from {module.__file__}"
    assert not is_compiled(reference())

# -- the two containers whose compiled form differs ----------------------------------------
@needs_compiled
def test_the_compiled_heap_pops_in_time_then_arrival_order_as_heapq_does():
    """Many ties, pushes between pops, growth past the first allocation."""
    rng = np.random.default_rng(7)
    fast, slow = ENGINE.Heap(), reference().Heap()
    popped_fast, popped_slow, pushed = [], [], []
    for step in range(3000):
        if rng.random() < 0.6 or not slow.n:
            key = float(rng.integers(0, 40)) / 4
            entry = (key, step, step % 5, -step)
            pushed.append((key, len(pushed)) + entry[1:])
            fast.push(*entry)
            slow.push(*entry)
        else:
            popped_fast.append(fast.pop())
            popped_slow.append(slow.pop())
            assert fast.n == slow.n
            if fast.n:
                assert fast.first_key() == slow.first_key()
    while slow.n:
        popped_fast.append(fast.pop())
        popped_slow.append(slow.pop())
    assert popped_fast == popped_slow
    assert sorted(pushed) == sorted(popped_slow)
    keys = [(k, seq) for k, seq, *_ in popped_slow]
    assert len(keys) == len(pushed)


@needs_compiled
def test_the_compiled_task_queue_behaves_as_a_deque():
    from collections import deque
    rng = np.random.default_rng(11)
    fast, slow = ENGINE.TaskQueue(), deque()
    for step in range(5000):
        r = rng.random()
        if r < 0.55 or not slow:
            fast.append(step)
            slow.append(step)
        elif r < 0.8:
            assert fast.pop() == slow.pop()
        else:
            assert fast.popleft() == slow.popleft()
        assert len(fast) == len(slow)


# -- identical Timelines -------------------------------------------------------------------
def _same(a, b, where: str) -> None:
    """Equal in type and value; arrays in dtype, shape and every bit."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {a.dtype}{a.shape} vs " \
            f"{b.dtype}{b.shape}"
        if a.tobytes() != b.tobytes():
            i = int(np.flatnonzero(a.reshape(-1) != b.reshape(-1))[0]) if a.size else 0
            pytest.fail(f"{where}: first difference at {i}: {a.reshape(-1)[i]!r} vs "
                        f"{b.reshape(-1)[i]!r}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(a)} vs {sorted(b)}"
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, float):
        assert np.float64(a).tobytes() == np.float64(b).tobytes(), f"{where}: {a!r} vs {b!r}"
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"

_programs: dict = {}

def _program(kernel_path, overrides, hw_path):
    """Compiled once per distinct (kernel, stage settings): studies share stages."""
    key = (str(kernel_path), repr(sorted(overrides.items())), str(hw_path))
    if key not in _programs:
        kernel = resolve_kernel(kernel_path, overrides)
        hw = load_hardware(hw_path)
        _programs[key] = (kernel, hw, compile_kernel(kernel, hw))
    return _programs[key]

@needs_compiled
@pytest.mark.parametrize("study_name", STUDIES)
def test_every_stage_and_sched_mode_gives_the_reference_timeline(study_name):
    study = load_study(CONFIGS / "studies" / f"{study_name}.yaml")
    if study.python_kernel is not None:
        pytest.fail(f"{study_name}: a Python-kernel study; teach this test to import it "
                    f"(ptolab import) rather than leave it unchecked")
    kernel_path = find_config(CONFIGS / "kernels", study.kernel, "kernel")
    hw_path = find_config(CONFIGS / "hardware", study.hardware, "hardware")
    ref = reference()
    for stage in study.stages:
        kernel, hw, program = _program(kernel_path, stage.set, hw_path)
        for mode in range(4):
            options = kernel.options.runtime_options.model_copy(
                update={"device_sched_mode": mode})
            fast = ENGINE.Machine(hw, program, options).run()
            slow = ref.Machine(hw, program, options).run()
            assert fast.task_start.size == program.leaf_tasks
            _same(fast, slow, f"{study_name}/{stage.name}/mode {mode}: Timeline")

def _runs_with(study_name: str, values: dict):
    """Every stage of the study under every device_sched_mode on its hardware with
    ``values`` set: (where, compiled run, reference run, compiled run without them)."""
    from simcore.spec.hardware import with_values

    study = load_study(CONFIGS / "studies" / f"{study_name}.yaml")
    kernel_path = find_config(CONFIGS / "kernels", study.kernel, "kernel")
    hw_path = find_config(CONFIGS / "hardware", study.hardware, "hardware")
    ref = reference()
    for stage in study.stages:
        kernel, base, program = _program(kernel_path, stage.set, hw_path)
        hw = with_values(base, values)
        for mode in range(4):
            options = kernel.options.runtime_options.model_copy(
                update={"device_sched_mode": mode})
            yield (f"{study_name}/{stage.name}/mode {mode}",
                   ENGINE.Machine(hw, program, options).run(),
                   ref.Machine(hw, program, options).run(),
                   ENGINE.Machine(base, program, options).run())


@needs_compiled
@pytest.mark.parametrize("study_name", ["matmul_l2_split", "sched_l2_affinity"])
def test_random_l2_replacement_gives_the_reference_timeline(study_name):
    """No shipped chip evicts at random (memory.l2_replacement), so the studies above do
    not reach that path of l2.py: the two studies that lean on L2 run it here, through
    both engines, under every device_sched_mode."""
    random = {"memory.l2_replacement": "random", "memory.l2_usable_fraction": 0.2}
    for where, fast, slow, _ in _runs_with(study_name, random):
        assert fast.task_l2_bytes.sum() > 0
        _same(fast, slow, f"{where}, random L2: Timeline")


@needs_compiled
@pytest.mark.parametrize("study_name", ["skinny_matmul_rewrite", "multi_stitch"])
def test_a_cold_start_gives_the_reference_timeline(study_name):
    """dav_2201 leaves core.first_task_delay_us unset, so the studies above never start a
    cold core late: two studies (one dev task and many) run it here through both engines,
    under every device_sched_mode, with the spread measured on silicon."""
    cold = {"core.first_task_delay_us": [0.0, 0.53, 1.77, 3.39, 5.31]}
    for where, fast, slow, warm in _runs_with(study_name, cold):
        assert fast.task_start.min() > warm.task_start.min() or \
            fast.task_end.max() > warm.task_end.max()
        _same(fast, slow, f"{where}, cold start: Timeline")

# -- the fallback ---------------------------------------------------------------------------
def _run(*parts: str, env=None):
    """Python source ``parts`` run in a fresh interpreter from the repo."""
    env = {k: v for k, v in os.environ.items() if k != "PTOLAB_ENGINE"} | (env or {})
    script = "".join(textwrap.dedent(part) for part in parts)
    return subprocess.run([sys.executable, "-c", script], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=120)


SIMULATE = f"""
    from simcore.machine import simulate, engine
    from simcore.machine.reference import is_compiled
    from pipeline.runner import resolve_kernel
    from simcore.compiler import compile_kernel
    from simcore.spec.hardware import load_hardware
    kernel = resolve_kernel({str(CONFIGS / 'kernels' / 'tiling_add.yaml')!r}, {{}})
    hw = load_hardware({str(find_config(CONFIGS / 'hardware', 'dav_2201', 'hardware'))!r})
    timeline = simulate(hw, compile_kernel(kernel, hw), kernel.options.runtime_options)
    print(is_compiled(engine), timeline.kernel_us > 0)
"""


def _one_warning(proc, words: str) -> None:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "False True", proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], proc.stderr


def test_without_the_compiled_module_the_python_engine_runs_with_one_warning(tmp_path):
    """A failed build leaves only the .py files, and maybe no Cython at all: importing
    simcore.machine warns in one line and simulates with the Python engine."""
    shutil.copytree(REPO / "simcore", tmp_path / "simcore",
                    ignore=shutil.ignore_patterns("*.so", "*.c", "compiled_sources.json",
                                                  "__pycache__"))
    proc = _run(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})

        class NoCython:
            def find_spec(self, name, path=None, target=None):
                if name == "cython" or name.startswith("Cython"):
                    raise ImportError(name)

        sys.meta_path.insert(0, NoCython())
    """, SIMULATE)
    _one_warning(proc, "compiled engine is not built")


def test_a_compiled_module_older_than_its_source_is_not_used(tmp_path):
    """engine.py edited (or merged) but not rebuilt: the stale compiled engine must not run
    the old code; the Python engine runs, with one line saying why."""
    if not COMPILED:
        pytest.skip(NOT_BUILT)
    shutil.copytree(REPO / "simcore", tmp_path / "simcore",
                    ignore=shutil.ignore_patterns("*.c", "__pycache__"))
    source = tmp_path / "simcore" / "machine" / "engine.py"
    source.write_text(source.read_text() + "\n# edited after the build\n")
    proc = _run(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
    """, SIMULATE)
    _one_warning(proc, "built from older sources")


def test_ptolab_engine_python_selects_the_reference():
    script = ("import simcore.machine.engine as e; "
              "from simcore.machine.reference import is_compiled; print(is_compiled(e))")
    proc = _run(script, env={"PTOLAB_ENGINE": "python"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "False" and not proc.stderr.strip(), proc.stderr
