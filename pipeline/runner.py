"""compile and simulate as library calls: what ``ptolab`` and the workflow run.

Resolution order for a kernel's options: the kernel file's defaults, then the
``--set`` overrides (a study stage's ``set`` is passed the same way), then the
environment switches PyPTO reads (``DUMP_DEVICE_PERF``).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from simcore.compiler import Program, compile_kernel
from simcore.machine import Timeline, simulate
from simcore.spec import overrides as ov
from simcore.spec.errors import ConfigError
from simcore.spec.hardware import Hardware, load_hardware
from simcore.spec.kernel import Kernel
from simcore.spec.loader import read_mapping, validate

from .emit.atomic import write_json
from .emit.metrics import metrics
from .emit.perf_trace import devtask_limit, write_perf_files
from .emit.pmu import write_pmu_files
from .emit.pmu_trace import write_pmu_trace
from .emit.swimlane import aicore_summary, write_swimlane_files
from .emit.topo import write_compile_files


def resolve_kernel(path: Path, overrides: Mapping[str, Any]) -> Kernel:
    data = ov.apply(read_mapping(Path(path)), dict(overrides))
    source = str(path) + (" (with --set " + ", ".join(overrides) + ")" if overrides else "")
    return validate(Kernel, data, source, "kernel")


def default_output_dir() -> Path:
    """output/output_<YYYYmmdd_HHMMSS>_<us>_<pid>, as PyPTO names its run folders."""
    now = time.time()
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(now))
    micros = int((now % 1) * 1_000_000)
    base = os.environ.get("TILE_FWK_OUTPUT_DIR") or "output"
    return Path(base) / f"output_{stamp}_{micros:06d}_{os.getpid()}"


def env_flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass
class RunResult:
    kernel: Kernel
    hardware: Hardware
    program: Program
    timeline: Timeline
    metrics: dict
    summary: str


def compile_for(kernel: Kernel, hw: Hardware, kernel_path: Path) -> Program:
    """Compile, naming the kernel file in any error the compiler raises."""
    try:
        return compile_kernel(kernel, hw)
    except ConfigError as exc:
        raise exc.located(str(kernel_path)) from None


def run_compile(kernel_path: Path, overrides: Mapping[str, Any], hardware: str | Path,
                out: Path) -> dict:
    kernel = resolve_kernel(kernel_path, overrides)
    hw = load_hardware(hardware)
    return write_compile_files(compile_for(kernel, hw, kernel_path), Path(out))


def run_simulate(kernel_path: Path, overrides: Mapping[str, Any], hardware: str | Path,
                 out: Path, rounds: int = 1, env: Mapping[str, str] | None = None) -> RunResult:
    env = os.environ if env is None else env
    kernel = resolve_kernel(kernel_path, overrides)
    hw = load_hardware(hardware)
    program = compile_for(kernel, hw, kernel_path)
    timeline = simulate(hw, program, kernel.options.runtime_options)
    dump_perf = env_flag(env, "DUMP_DEVICE_PERF")
    perf_limit = devtask_limit(env) if dump_perf else None   # a bad value stops before any file
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    freq = hw.aicpu.profile_freq_mhz
    summary = aicore_summary(timeline)[2]
    if kernel.options.debug_options.runtime_debug_mode == 1:
        write_compile_files(program, out)
        summary = write_swimlane_files(program, timeline, freq, out)
    if dump_perf:
        swimlane = out / "merged_swimlane.json" \
            if kernel.options.debug_options.runtime_debug_mode == 1 else None
        write_perf_files(timeline, freq, rounds, hw.aicpu.launch_gap_us, out, perf_limit,
                         merged_swimlane=swimlane)
    write_pmu_files(program, timeline, hw, env, out)
    if kernel.options.codegen_options.enable_pmu_trace:
        write_pmu_trace(program, timeline, hw, out)
    result = metrics(program, timeline, hw)
    write_json(out / "metrics.json", result)   # last: its presence marks a complete run
    return RunResult(kernel, hw, program, timeline, result, summary)
