"""Speed and memory of compile and simulate, from 10^4 to 10^6 leaf tasks.

    python benchmarks/sim_speed.py [--simpy] [--sizes 10000,100000,1000000] [--repeat N]

Uses configs/kernels/bench_1m.yaml with its CALLS param scaled (1000 tiles per
root call).  Prints one row per size: leaf tasks, compile s, simulate s, leaf
tasks per simulated second, peak RSS; with --simpy also the SimPy reference
(benchmarks/simpy_reference.py) on the same program and durations.  Simulate
time covers preparing the Machine and one run; with --repeat N it is the best of
N, which steadies the figure on a busy host.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline.runner import resolve_kernel  # noqa: E402
from simcore.compiler import compile_kernel  # noqa: E402
from simcore.machine.engine import Machine  # noqa: E402
from simcore.spec.hardware import load_hardware  # noqa: E402


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--simpy", action="store_true", help="also time the SimPy reference")
    ap.add_argument("--repeat", type=int, default=1, help="best of N simulate timings")
    args = ap.parse_args()
    hw = load_hardware("dav_2201")
    print(f"{'leaf_tasks':>10} {'compile_s':>9} {'simulate_s':>10} {'tasks/s':>9} "
          f"{'peak_MB':>8}" + (f" {'simpy_s':>8} {'simpy_tasks/s':>13} {'kernel_us ours/simpy':>22}"
                               if args.simpy else ""))
    for size in (int(s) for s in args.sizes.split(",")):
        kernel = resolve_kernel(REPO / "configs/kernels/bench_1m.yaml",
                                {"params.CALLS": max(size // 1000, 1)})
        t0 = time.perf_counter()
        program = compile_kernel(kernel, hw)
        compile_s = time.perf_counter() - t0
        simulate_s = float("inf")
        for _ in range(max(args.repeat, 1)):
            t1 = time.perf_counter()
            machine = Machine(hw, program, kernel.options.runtime_options)
            timeline = machine.run()
            simulate_s = min(simulate_s, time.perf_counter() - t1)
        row = (f"{program.leaf_tasks:>10} {compile_s:>9.2f} {simulate_s:>10.2f} "
               f"{program.leaf_tasks / simulate_s:>9.0f} {peak_rss_mb():>8.0f}")
        if args.simpy:
            from simpy_reference import simulate_simpy
            durations = timeline.task_end - timeline.task_start
            t3 = time.perf_counter()
            span = simulate_simpy(program, hw, durations, machine.sched_threads)
            t4 = time.perf_counter()
            row += (f" {t4 - t3:>8.2f} {program.leaf_tasks / (t4 - t3):>13.0f} "
                    f"{timeline.kernel_us:>10.1f}/{span:<10.1f}")
        print(row, flush=True)


if __name__ == "__main__":
    main()
