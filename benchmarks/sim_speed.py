"""Speed of the simulator's engine, compiled and as Python, from 10^4 to 10^6 leaf tasks.

    python benchmarks/sim_speed.py [--simpy] [--no-reference] [--sizes 10000,100000,1000000]
                                   [--repeat N] [--targets]

Uses configs/kernels/bench_1m.yaml with its CALLS param scaled (1000 tiles per root call).
Per size: compile CPU seconds, then leaf tasks per CPU second of simulate (preparing the
Machine and one run) through the compiled engine (what ``simcore.machine`` runs once
``pip install -e .`` has built it) and through the same source as Python (the reference,
simcore/machine/reference.py); with --simpy also the SimPy implementation of the same
scheduling model (benchmarks/simpy_reference.py) on the same program and durations.  CPU
time, best of --repeat runs, steadies the figures on a busy host.  Ends with the table of
leaf tasks per second the README's Speed section quotes.

``--targets`` then measures the rest of what a user waits for and prints each figure
beside the target the project set for it (the README's Speed section): the compiler's leaf
tasks per CPU second on every shipped kernel (benchmarks/compile_speed.py), ``ptolab
simulate`` of the 10^6-task kernel without and with every profiling file, each in a fresh
process (benchmarks/simulate_1m.py), and a clean ``snakemake -c2`` build of every default
study followed by one knob edited three times (benchmarks/workflow_loop.py), all on this
machine.  A few minutes.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from pipeline.runner import resolve_kernel, small_pages  # noqa: E402
from simcore.compiler import compile_kernel  # noqa: E402
from simcore.machine import engine as compiled  # noqa: E402
from simcore.machine.reference import is_compiled, reference  # noqa: E402
from simcore.spec.hardware import load_hardware  # noqa: E402


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def best_cpu(fn, repeat: int):
    """(least CPU seconds over ``repeat`` calls, the last call's result)."""
    best, out = float("inf"), None
    for _ in range(max(repeat, 1)):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--simpy", action="store_true", help="also time the SimPy reference")
    ap.add_argument("--no-reference", action="store_true",
                    help="skip the Python engine (several seconds at 10^6)")
    ap.add_argument("--repeat", type=int, default=3, help="best of N simulate timings")
    ap.add_argument("--targets", action="store_true",
                    help="also time compile, whole simulate runs and the workflow, and print "
                         "every figure against its target")
    args = ap.parse_args()
    # as every ptolab command that compiles or simulates does (pipeline/runner.py): under
    # THP a 10^6-task compile spends most of its time faulting in huge pages
    small_pages()
    if not is_compiled(compiled):
        print("warning: the compiled engine is not built; both columns time Python",
              file=sys.stderr)
    python = reference()
    # whole-process runs first, while this process is small: a forked child's peak RSS
    # counts the parent's pages it held until exec
    whole = whole_runs() if args.targets else None
    hw = load_hardware("dav_2201")
    head = (f"{'leaf_tasks':>10} {'compile_s':>9} {'compiled_s':>10} {'compiled/s':>11} "
            f"{'python_s':>8} {'python/s':>9} {'speedup':>7}")
    if args.simpy:
        head += f" {'simpy_s':>8} {'simpy/s':>9} {'vs_simpy':>8} {'kernel_us ours/simpy':>22}"
    print(head + f" {'peak_MB':>8}", flush=True)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        kernel = resolve_kernel(REPO / "configs/kernels/bench_1m.yaml",
                                {"params.CALLS": max(size // 1000, 1)})
        options = kernel.options.runtime_options
        compile_s, program = best_cpu(lambda: compile_kernel(kernel, hw), 1)
        n = program.leaf_tasks
        fast_s, timeline = best_cpu(lambda: compiled.Machine(hw, program, options).run(),
                                    args.repeat)
        row = f"{n:>10} {compile_s:>9.2f} {fast_s:>10.3f} {n / fast_s:>11.0f}"
        slow_s = float("nan")
        if not args.no_reference:
            slow_s, _ = best_cpu(lambda: python.Machine(hw, program, options).run(),
                                 1 if n >= 10 ** 6 else args.repeat)
        row += f" {slow_s:>8.2f} {n / slow_s:>9.0f} {slow_s / fast_s:>6.1f}x"
        simpy_s = float("nan")
        if args.simpy:
            from simpy_reference import simulate_simpy
            durations = timeline.task_end - timeline.task_start
            threads = compiled.Machine(hw, program, options).sched_threads
            t0 = time.process_time()
            span = simulate_simpy(program, hw, durations, threads)
            simpy_s = time.process_time() - t0
            row += (f" {simpy_s:>8.2f} {n / simpy_s:>9.0f} {simpy_s / fast_s:>7.1f}x "
                    f"{timeline.kernel_us:>10.1f}/{span:<10.1f}")
        print(row + f" {peak_rss_mb():>8.0f}", flush=True)
        rows.append((n, n / fast_s, n / slow_s, n / simpy_s, simpy_s / fast_s))
    print("\nleaf tasks per CPU second of simulate (prepare + run), bench_1m:\n")
    print("| leaf tasks | compiled engine | Python engine (reference) | SimPy | compiled / SimPy |")
    print("|---:|---:|---:|---:|---:|")
    for n, fast, slow, simpy, ratio in rows:
        def k(v):
            return "-" if v != v else f"{v / 1e3:,.0f}k"
        print(f"| {n:,} | {k(fast)} | {k(slow)} | {k(simpy)} | "
              f"{'-' if ratio != ratio else f'{ratio:.0f}x'} |")

    if args.targets:
        print_targets(rows, whole)


def whole_runs() -> list[tuple[str, dict]]:
    """``ptolab simulate`` of bench_1m without and with every profiling file, each in a
    fresh process: (command, its wall, user, sys seconds and peak RSS)."""
    from simulate_1m import COMMANDS, run_once

    scratch = Path(tempfile.mkdtemp(prefix="ptolab_targets_"))
    try:
        runs = []
        for name, (extra, env) in COMMANDS.items():
            runs.append((name, run_once(REPO, extra, env, scratch / "run")))
            shutil.rmtree(scratch / "run", ignore_errors=True)
        return runs
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def print_targets(engine_rows, whole) -> None:
    """Every speed target beside what this machine measures now."""
    from compile_speed import kernel_rates
    from workflow_loop import edit_knob, snakemake

    table = []
    rates = [fast for _, fast, *_ in engine_rows]
    ratios = [r for *_, r in engine_rows if r == r]
    ratio = f", {min(ratios):.0f}-{max(ratios):.0f}x SimPy" if ratios else ""
    sizes = " / ".join(f"{n:,}" for n, *_ in engine_rows)
    table.append((f"engine, leaf tasks per CPU s ({sizes} tasks)",
                  f"{min(rates) / 1e3:,.0f}k-{max(rates) / 1e3:,.0f}k{ratio}",
                  ">= 1M at every size, >= 20x SimPy",
                  min(rates) >= 1e6 and (not ratios or min(ratios) >= 20)))
    # the slowest three by leaf tasks per second, with their size: a kernel of one leaf task
    # measures the compiler's cost per traced op, not per task
    compiled = sorted(((tasks / s, name, tasks, s) for name, tasks, s in kernel_rates(repeat=2)
                       if s > 0))
    table.append(("compiler, leaf tasks per CPU s",
                  "slowest: " + ", ".join(f"{name} {rate:,.0f}/s ({tasks} tasks, {s * 1e3:.0f} ms)"
                                          for rate, name, tasks, s in compiled[:3]),
                  ">= 200k on every shipped kernel", compiled[0][0] >= 2e5))
    for (name, r), (wall_max, rss_max) in zip(whole, [(4, 1000), (15, 2000)]):
        table.append((f"ptolab {name}, bench_1m",
                      f"{r['wall']:.1f} s wall ({r['user'] + r['sys']:.1f} s CPU), "
                      f"{r['rss_mb']:,.0f} MB", f"< {wall_max} s, < {rss_max / 1000:g} GB",
                      r["wall"] < wall_max and r["rss_mb"] < rss_max))
    scratch = Path(tempfile.mkdtemp(prefix="ptolab_targets_"))
    try:
        shutil.copytree(REPO / "configs", scratch / "configs")
        clean, _, jobs = snakemake(scratch, 2)
        table.append((f"snakemake -c2 from clean ({jobs} jobs)", f"{clean:.1f} s", "< 60 s",
                      clean < 60))
        edits = []
        for _ in range(3):
            edit_knob(scratch / "configs" / "studies" / "multi_stitch.yaml")
            edits.append(snakemake(scratch, 2)[0])
        table.append(("one knob edited -> report (3 edits)",
                      " / ".join(f"{s:.2f}" for s in edits) + " s", "< 2 s", max(edits) < 2))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"\nspeed targets on this machine ({os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.2f}):\n")
    print("| what | now | target | met |")
    print("|---|---|---|---|")
    for what, now, target, met in table:
        print(f"| {what} | {now} | {target} | {'yes' if met else 'NO'} |")


if __name__ == "__main__":
    main()
