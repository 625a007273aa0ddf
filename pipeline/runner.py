"""compile, simulate and whole workflow stages as library calls: what ``ptolab`` runs.

Resolution order for a kernel's options: the kernel file's defaults, then the
``--set`` overrides (a study stage's ``set`` is passed the same way), then the
environment switches PyPTO reads (``DUMP_DEVICE_PERF``).

``run_compile`` and ``run_simulate`` write into the folder they are given; the
commands hand them a folder they own (pipeline/outdir.py).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from simcore.compiler import Program, compile_kernel
from simcore.compiler.estimate import check_size
from simcore.machine import Timeline, simulate
from simcore.spec import overrides as ov
from simcore.spec.errors import ConfigError
from simcore.spec.hardware import Hardware, load_hardware, race_median, race_variants
from simcore.spec.kernel import Kernel
from simcore.spec.loader import read_mapping, validate

from .emit.atomic import write_json
from .emit.metrics import metrics
from .emit.perf_trace import devtask_limit, round_ticks, write_perf_files
from .emit.pmu import write_pmu_files
from .emit.pmu_trace import write_pmu_trace
from .emit.swimlane import aicore_summary, launch_shift, write_swimlane_files
from .emit.topo import write_compile_files
from .merge_keys import merges_held_apart, unmatched_merge_keys

# Above this many tile operations a build takes seconds: say what is happening on stderr.
PROGRESS_TILE_OPS = 200_000
# upstream's runtime debug modes beyond the swimlane (docs/zh/api/config/
# pypto-set_debug_options.md at 883e7dfb) check or dump what a run computes, not its timing
DEBUG_MODES_WITHOUT_FILES = {
    2: "(upstream: run on the AICORE_MODEL simulator instead of the chip) changes nothing "
       "here: ptolab's run is a model already; 1 gives the swimlane.",
    3: "(upstream: dump data for checking the runtime's dependencies) writes nothing here: "
       "ptolab computes no tensor values; dyn_topo.txt (mode 1) lists the dependencies.",
    4: "(upstream: check GM accesses for out-of-bounds) checks nothing here: ptolab refuses "
       "a box that leaves its tensor when it compiles.",
}
COMPILE_FILES = ("program.json", "dyn_topo.txt", "compile.json")   # a runtime_debug_mode=1 run carries them


_PR_SET_THP_DISABLE = 41     # linux/prctl.h


def small_pages() -> None:
    """Opt this process out of transparent huge pages (Linux; elsewhere nothing).

    A build of 10^6 leaf tasks allocates and drops hundreds of MB of numpy temporaries;
    under THP ``always`` each first touch of fresh memory faults in, zeroes and may
    compact a whole 2 MB page, which measured as half the system time of
    ``ptolab simulate bench_1m`` (benchmarks/simulate_1m.py).  The numbers computed
    do not depend on it.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def resolve_kernel(path: Path, overrides: Mapping[str, Any]) -> Kernel:
    try:
        data = ov.apply(read_mapping(Path(path)), dict(overrides))
    except ConfigError as exc:
        raise exc.located(str(path)) from None
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


class Progress:
    """One stderr line per step of a long build; silent for small ones."""

    def __init__(self, tile_ops: int):
        self.on = tile_ops > PROGRESS_TILE_OPS
        self.t0 = time.perf_counter()
        if self.on:
            self.say(f"about {tile_ops:,} tile operations to build")

    def say(self, text: str) -> None:
        if self.on:
            print(f"ptolab: [{time.perf_counter() - self.t0:6.1f} s] {text}", file=sys.stderr,
                  flush=True)


@dataclass
class RunResult:
    kernel: Kernel
    hardware: Hardware
    program: Program
    timeline: Timeline
    metrics: dict
    summary: str
    summary_us: float        # the summary's end-to-end time, from the files' counter stamps


def size_check(kernel: Kernel, kernel_path: Path) -> Progress:
    """Refuse a kernel whose program cannot fit before building any of it."""
    try:
        return Progress(check_size(kernel).tile_ops)
    except ConfigError as exc:
        raise exc.located(str(kernel_path)) from None


def compile_for(kernel: Kernel, hw: Hardware, kernel_path: Path,
                progress: Progress | None = None) -> Program:
    """Compile, naming the kernel file in any error the compiler raises."""
    progress = progress or size_check(kernel, kernel_path)
    progress.say("compiling")
    try:
        program = compile_kernel(kernel, hw)
    except ConfigError as exc:
        raise exc.located(str(kernel_path)) from None
    progress.say(f"compiled: {program.leaf_tasks:,} leaf tasks")
    for note in (dead_ops_dropped(program) + unmatched_merge_keys(kernel, program)
                 + merges_held_apart(program)):
        print(f"ptolab: note: {note}", file=sys.stderr)
    return program


def dead_ops_dropped(program: Program) -> list[str]:
    """One sentence naming the op statements the compiler dropped as dead, if any."""
    dropped = program.info.get("dead_ops", ())
    if not dropped:
        return []
    shown = "; ".join(dropped[:5]) + (f"; and {len(dropped) - 5} more" if len(dropped) > 5 else "")
    return [f"{len(dropped)} op(s) dropped because their results reach no kernel output "
            f"(upstream's dead-operation sweep does the same): {shown}. Nothing to do unless "
            f"you meant to use them."]


def run_compile(kernel_path: Path, overrides: Mapping[str, Any], hardware: str | Path,
                out: Path) -> dict:
    small_pages()
    kernel = resolve_kernel(kernel_path, overrides)
    hw = load_hardware(hardware)
    return write_compile_files(compile_for(kernel, hw, kernel_path), Path(out))


def run_simulate(kernel_path: Path, overrides: Mapping[str, Any], hardware: str | Path,
                 out: Path, rounds: int = 1, env: Mapping[str, str] | None = None,
                 race: bool = False) -> RunResult:
    small_pages()
    kernel = resolve_kernel(kernel_path, overrides)
    hw = load_hardware(hardware)
    if race:
        require_race(hw, hardware)
    progress = size_check(kernel, kernel_path)
    program = compile_for(kernel, hw, kernel_path, progress)
    return simulate_program(kernel, hw, program, Path(out), rounds, env, progress, race=race)


def require_race(hw: Hardware, hardware: str | Path) -> None:
    """A race needs the chip's [race] table: say so before anything is built."""
    if hw.race is None:
        raise ConfigError(f"hardware '{hw.name}' has no [race] table (the costs to scale and "
                          f"the factors), so there is nothing to race; add one (see "
                          f"configs/hardware/dav_2201.toml) or run without race.",
                          source=str(hardware))


def simulate_program(kernel: Kernel, hw: Hardware, program: Program, out: Path, rounds: int,
                     env: Mapping[str, str] | None, progress: Progress,
                     compiled: Path | None = None, race: bool = False) -> RunResult:
    """Simulate a compiled program and write PyPTO's files into ``out``.

    ``compiled``: a folder already holding this program's compile files, copied
    rather than written again.  ``race``: also run the chip's race variants
    (``race_runs``); the files are the run of the chip as it is.
    """
    env = os.environ if env is None else env
    dump_perf = env_flag(env, "DUMP_DEVICE_PERF")
    perf_limit = devtask_limit(env) if dump_perf else None   # a bad value stops before any file
    progress.say("simulating")
    timeline = simulate(hw, program, kernel.options.runtime_options)
    progress.say("writing files")
    out.mkdir(parents=True, exist_ok=True)
    freq = hw.aicpu.profile_freq_mhz
    summary_us, _, summary = aicore_summary(timeline, freq)
    mode = kernel.options.debug_options.runtime_debug_mode
    debug = mode == 1
    if mode in DEBUG_MODES_WITHOUT_FILES:
        print(f"ptolab: note: runtime_debug_mode={mode} {DEBUG_MODES_WITHOUT_FILES[mode]}",
              file=sys.stderr)
    # the per-task files hold the last launch (swimlane.launch_shift)
    shift = launch_shift(rounds, round_ticks(timeline, freq, hw.aicpu.launch_gap_us))
    views: list[str] = []   # the AICPU View of each perf file, for the merged swimlane
    if dump_perf:
        write_perf_files(timeline, freq, rounds, hw.aicpu.launch_gap_us, out, perf_limit,
                         aicpu_views=views if debug else None)
    if debug:
        if compiled is None:
            write_compile_files(program, out)
        else:
            for name in COMPILE_FILES:
                shutil.copyfile(compiled / name, out / name)
        summary = write_swimlane_files(program, timeline, freq, out, aicpu_views=views,
                                       shift=shift)
    write_pmu_files(program, timeline, hw, env, out, shift)
    if kernel.options.codegen_options.enable_pmu_trace:
        write_pmu_trace(program, timeline, hw, out)
    result = metrics(program, timeline, hw)
    if race:
        progress.say("racing")
        runs = race_runs(kernel, hw, program, timeline)
        write_json(out / RACE_FILE, runs)
        result.update(race_summary(runs))
    write_json(out / "metrics.json", result)   # last: its presence marks a complete run
    progress.say("done")
    return RunResult(kernel, hw, program, timeline, result, summary, summary_us)


RACE_FILE = "race.json"
RACE_METRICS = ("kernel_us", "e2e_us")


def race_runs(kernel: Kernel, hw: Hardware, program: Program, timeline: Timeline) -> dict:
    """The program once per factor of the chip's race (simcore/spec/hardware.py ``Race``):
    which schedule AICPU owns which chain of dependent tasks turns on sub-percent timing,
    so one run is one draw.  ``timeline`` is the run at factor 1.0; the variants scale only
    costs, so the one compile serves them all."""
    options = kernel.options.runtime_options
    runs = []
    for factor, variant in race_variants(hw):
        tl = timeline if factor == 1.0 else simulate(variant, program, options)
        runs.append({"factor": factor, **{m: round(getattr(tl, m), 4) for m in RACE_METRICS}})
    return {"paths": list(hw.race.paths), "why": hw.race.why, "runs": runs}


def race_summary(race: dict) -> dict:
    """Flat metrics of a race: per metric its median run and its smallest and largest."""
    out = {"race_runs": len(race["runs"])}
    for m in RACE_METRICS:
        median, lo, hi = race_median(r[m] for r in race["runs"])
        out.update({f"{m}_race_median": median, f"{m}_race_min": lo, f"{m}_race_max": hi})
    return out


# What the workflow turns on for every stage: swimlanes and AICPU/AICore phase data.
STAGE_SETS = {"debug_options.runtime_debug_mode": 1}
STAGE_ENV = {"DUMP_DEVICE_PERF": "true"}


def run_stage(kernel_path: Path, overrides: Mapping[str, Any], hardware: str | Path,
              stage_dir: Path, rounds: int, env: Mapping[str, str] | None = None,
              race: bool = False, drop_on_failure: bool = False) -> dict:
    """One workflow stage into ``stage_dir``: compile/, run/ and parsed/ from one compile.

    The folder is built aside and swapped in whole, so no file of an earlier
    build of the stage (e.g. a perf file of a round count since lowered) survives.
    ``race``: the run also holds the chip's race variants (``race_runs``).
    ``drop_on_failure``: a failed build removes the earlier one too (under the folder's
    lock, never while another run holds it).  The workflow asks for it: Snakemake deletes
    a failed job's declared outputs, and the rest of the earlier build must not stay
    behind looking complete.
    """
    from .outdir import FolderBusy, drop_folder

    try:
        return _stage(kernel_path, overrides, hardware, stage_dir, rounds, env, race)
    except FolderBusy:
        raise
    except BaseException:
        if drop_on_failure:
            drop_folder(stage_dir)
        raise


def _stage(kernel_path, overrides, hardware, stage_dir, rounds, env, race) -> dict:
    from .outdir import owned_folder
    from .parse.run import parse_run

    small_pages()
    env = {**(os.environ if env is None else env), **STAGE_ENV}
    kernel = resolve_kernel(kernel_path, {**overrides, **STAGE_SETS})
    hw = load_hardware(hardware)
    if race:
        require_race(hw, hardware)
    progress = size_check(kernel, kernel_path)
    program = compile_for(kernel, hw, kernel_path, progress)
    with owned_folder(stage_dir, "stage", adopt=True) as fresh:
        counts = write_compile_files(program, fresh / "compile")
        simulate_program(kernel, hw, program, fresh / "run", rounds, env, progress,
                         compiled=fresh / "compile", race=race)
        progress.say("parsing")
        parsed = parse_run(fresh / "run", fresh / "parsed")
    return {"compile": counts, "parsed": parsed}
