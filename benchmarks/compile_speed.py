"""Compile speed per shipped kernel: leaf tasks per second of compile_kernel.

    python benchmarks/compile_speed.py [--repeat N] [--kernels a,b] [--set kernel:key=value]

One row per configs/kernels/*.yaml (bench_1m at 10^5 leaf tasks unless --set says
otherwise): leaf tasks, best-of-N compile seconds (CPU time of this process, which a busy
shared host disturbs less than wall time) and leaf tasks per second.  A last row sums all.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipeline.runner import resolve_kernel, small_pages  # noqa: E402
from simcore.compiler import compile_kernel  # noqa: E402
from simcore.spec.hardware import load_hardware  # noqa: E402

# bench_1m at its shipped size takes minutes; 10^5 leaf tasks shows its rate
DEFAULT_SETS = {"bench_1m": {"params.CALLS": 100}}


def _value(text: str):
    try:
        return int(text)
    except ValueError:
        return text


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1, help="best of N compile timings")
    ap.add_argument("--kernels", default="", help="comma-separated kernel names (default all)")
    ap.add_argument("--set", action="append", default=[], metavar="KERNEL:KEY=VALUE",
                    help="override a kernel field, e.g. producer_consumer:params.R=8192")
    args = ap.parse_args()
    # as every ptolab command that compiles or simulates does (pipeline/runner.py): under
    # THP a 10^6-task compile spends most of its time faulting in huge pages
    small_pages()
    sets = {k: dict(v) for k, v in DEFAULT_SETS.items()}
    for item in args.set:
        name, assignment = item.split(":", 1)
        key, value = assignment.split("=", 1)
        sets.setdefault(name, {})[key] = _value(value)
    wanted = set(filter(None, args.kernels.split(",")))
    print(f"{'kernel':<24} {'leaf_tasks':>10} {'compile_s':>9} {'tasks/s':>9}")
    total_tasks, total_s = 0, 0.0
    for name, tasks, best in kernel_rates(args.repeat, sets, wanted):
        total_tasks += tasks
        total_s += best
        rate = tasks / best if best > 0 else float("inf")
        print(f"{name:<24} {tasks:>10} {best:>9.3f} {rate:>9.0f}", flush=True)
    if total_s > 0:
        print(f"{'all':<24} {total_tasks:>10} {total_s:>9.3f} {total_tasks / total_s:>9.0f}")


def kernel_rates(repeat: int = 1, sets: dict | None = None, wanted: set | None = None):
    """(kernel, leaf tasks, best-of-``repeat`` compile CPU seconds) per shipped kernel."""
    sets = DEFAULT_SETS if sets is None else sets
    hw = load_hardware("dav_2201")
    for path in sorted((REPO / "configs/kernels").glob("*.yaml")):
        if wanted and path.stem not in wanted:
            continue
        kernel = resolve_kernel(path, sets.get(path.stem, {}))
        best = float("inf")
        for _ in range(max(repeat, 1)):
            t0 = time.process_time()
            program = compile_kernel(kernel, hw)
            best = min(best, time.process_time() - t0)
        yield path.stem, program.leaf_tasks, best


if __name__ == "__main__":
    main()
