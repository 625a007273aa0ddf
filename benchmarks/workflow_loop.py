"""Wall time of the two loops a user waits for: a clean workflow build and a knob edit.

    python benchmarks/workflow_loop.py [--cores 2] [--study multi_stitch] [--keep DIR]

Copies configs/ into a scratch folder and runs the real ``snakemake`` against the
repository's Snakefile there:

1. clean build of every default study (all reports and results/index.html);
2. a no-op rerun (nothing to do: the planning cost alone);
3. one knob edited in one study (``stitch_function_max_num`` of the study's last stage
   halved), then the rebuild of that stage, its report and the index.

Prints one row per step: wall seconds, CPU seconds (Snakemake and every job it ran: on a
busy shared host wall time mostly measures the other tenants) and how many jobs Snakemake
ran.  The figures are whole-process times and include Snakemake's start-up.  ``--keep DIR``
builds in DIR and keeps it; run again with the same DIR, the clean build is skipped and the
knob is edited again (so the edit loop can be timed repeatedly without a full build).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def snakemake(work: Path, cores: int) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of Snakemake and its jobs, jobs run)."""
    before = os.times()
    start = time.perf_counter()
    proc = subprocess.run(["snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work),
                           f"-c{cores}"], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + \
        (after.children_system - before.children_system)
    if proc.returncode != 0:
        raise SystemExit(f"snakemake failed:\n{proc.stderr[-3000:]}")
    done = re.findall(r"(\d+) of (\d+) steps \(100%\) done", proc.stderr)
    return elapsed, cpu, int(done[-1][0]) if done else 0


def edit_knob(study_file: Path) -> str:
    """Halve the last stage's stitch_function_max_num (1 becomes 2, so every call edits);
    return the stage's name."""
    data = yaml.safe_load(study_file.read_text(encoding="utf-8"))
    stage = data["stages"][-1]
    key = "runtime_options.stitch_function_max_num"
    current = stage.setdefault("set", {}).get(key, 4)
    stage["set"][key] = int(current) // 2 if int(current) > 1 else 2
    study_file.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False),
                          encoding="utf-8")
    return stage["name"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--study", default="multi_stitch")
    ap.add_argument("--keep", type=Path, default=None,
                    help="build in this folder and keep it; reused (no clean build) if built")
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        if args.keep is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        else:
            work = args.keep.resolve()
            work.mkdir(parents=True, exist_ok=True)
        built = (work / "results" / "index.html").exists()
        if not (work / "configs").exists():
            shutil.copytree(REPO / "configs", work / "configs")
        print(f"{'step':<40} {'wall_s':>7} {'cpu_s':>7} {'jobs':>5}")
        steps = [("no-op rerun", None), ("one knob edited -> report", "edit")]
        if not built:
            steps.insert(0, ("clean build (all default studies)", None))
        for label, prepare in steps:
            if prepare == "edit":
                stage = edit_knob(work / "configs" / "studies" / f"{args.study}.yaml")
                label = f"knob edited ({args.study}/{stage})"
            seconds, cpu, jobs = snakemake(work, args.cores)
            print(f"{label:<40} {seconds:>7.1f} {cpu:>7.1f} {jobs:>5}", flush=True)


if __name__ == "__main__":
    main()
