"""Time of each file writer of a ``runtime_debug_mode=1`` + ``DUMP_DEVICE_PERF`` run.

    python benchmarks/emit_speed.py [--calls 100]

Compiles and simulates configs/kernels/bench_1m.yaml with CALLS root calls (1000
leaf tasks each; 1000 is the full 10^6), then runs the writers the runner runs, in
its order, and prints per writer its seconds, the bytes it wrote and the process's
peak RSS so far (the peak is mostly the compiled program and timeline; a writer
that held its whole document would raise it).  For the whole command, measure
``ptolab simulate`` under ``/usr/bin/time -v``.
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline.emit import perf_trace, swimlane, topo  # noqa: E402
from pipeline.emit.atomic import write_text  # noqa: E402
from pipeline.runner import resolve_kernel, small_pages  # noqa: E402
from simcore.compiler import compile_kernel  # noqa: E402
from simcore.machine import simulate  # noqa: E402
from simcore.spec.hardware import load_hardware  # noqa: E402


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=100)
    args = ap.parse_args()
    small_pages()       # as the ptolab commands do (pipeline/runner.py)
    kernel = resolve_kernel(REPO / "configs" / "kernels" / "bench_1m.yaml",
                            {"params.CALLS": args.calls, "debug_options.runtime_debug_mode": 1})
    hw = load_hardware("dav_2201")
    program = compile_kernel(kernel, hw)
    tl = simulate(hw, program, kernel.options.runtime_options)
    freq = hw.aicpu.profile_freq_mhz
    with tempfile.TemporaryDirectory(prefix="emit_speed_") as tmp:
        run_writers(program, tl, hw, freq, Path(tmp))


def run_writers(program, tl, hw, freq: float, out: Path) -> None:
    print(f"{program.leaf_tasks:,} leaf tasks; peak RSS after simulate {peak_rss_mb():.0f} MB")
    views: list[str] = []
    steps = [
        ("perf + AICPU view files", lambda: perf_trace.write_perf_files(
            tl, freq, 1, hw.aicpu.launch_gap_us, out, perf_trace.devtask_limit(os.environ),
            aicpu_views=views)),
        ("program.json, dyn_topo.txt", lambda: topo.write_compile_files(program, out)),
        ("tilefwk_L1_prof_data.json", lambda: swimlane.write_l1_prof_data(
            program, tl, freq, out / "tilefwk_L1_prof_data.json")),
        ("merged_swimlane.json", lambda: swimlane.write_merged_swimlane(
            program, tl, freq, out / "merged_swimlane.json", views)),
        ("bubble_analysis.log", lambda: write_text(out / "bubble_analysis.log",
                                                   swimlane.bubble_log(program, tl, freq))),
    ]
    print(f"{'writer':<28} {'s':>7} {'MB written':>11} {'peak RSS MB':>12}")
    total = 0.0
    for name, step in steps:
        before = folder_bytes(out)
        t0 = time.perf_counter()
        step()
        dt = time.perf_counter() - t0
        total += dt
        print(f"{name:<28} {dt:7.2f} {(folder_bytes(out) - before) / 1e6:11.1f} "
              f"{peak_rss_mb():12.0f}")
    print(f"{'all writers':<28} {total:7.2f}")


if __name__ == "__main__":
    main()
