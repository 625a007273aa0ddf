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
4. the same edit under ``ptolab watch`` (pipeline/watch.py, started on the built folder):
   wall seconds from saving the file to the rewritten report, and to Snakemake having
   recorded the rebuild (the watch's background ``snakemake --touch``).

``--breakdown`` splits the knob-edit step's wall time: Snakemake until the first job
starts, each job (a ``ptolab`` wrapper put first on PATH notes when each starts and ends),
and Snakemake after the last one; plus ``snakemake --version``, the start-up floor.
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


def snakemake(work: Path, cores: int, env: dict | None = None) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of Snakemake and its jobs, jobs run)."""
    before = os.times()
    start = time.perf_counter()
    proc = subprocess.run(["snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work),
                           f"-c{cores}"], capture_output=True, text=True, env=env)
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


WRAPPER = """#!/bin/sh
echo "start $(date +%s.%N) $1" >> {log}
{ptolab} "$@"
rc=$?
echo "end $(date +%s.%N) $1" >> {log}
exit $rc
"""


def breakdown(work: Path, cores: int, scratch: Path) -> None:
    """The knob-edit step again, its wall time split at the jobs' starts and ends."""
    log = scratch / "jobs.log"
    (scratch / "bin").mkdir()
    wrapper = scratch / "bin" / "ptolab"
    wrapper.write_text(WRAPPER.format(log=log, ptolab=shutil.which("ptolab")))
    wrapper.chmod(0o755)
    start = time.perf_counter()
    subprocess.run(["snakemake", "--version"], capture_output=True, check=True)
    print(f"{'  snakemake --version (start-up floor)':<40} {time.perf_counter() - start:>7.2f}")
    env = {**os.environ, "PATH": f"{scratch / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    t0 = time.time()
    seconds, _, _ = snakemake(work, cores, env)
    marks = [line.split() for line in log.read_text().splitlines()]
    starts = [float(t) for kind, t, _ in marks if kind == "start"]
    ends = [float(t) for kind, t, _ in marks if kind == "end"]
    print(f"{'  snakemake before the first job':<40} {min(starts) - t0:>7.2f}")
    for (kind, t, what), (_, t_end, _) in zip(marks[::2], marks[1::2]):
        print(f"{'  job: ptolab ' + what:<40} {float(t_end) - float(t):>7.2f}")
    print(f"{'  snakemake after the last job':<40} {t0 + seconds - max(ends):>7.2f}")


def watch_edit(work: Path, study: str, cores: int) -> tuple[float, float]:
    """(seconds to the report, seconds to the record) for one knob edit under a watch."""
    log = work / "watch-bench.out"
    with open(log, "w") as out:
        proc = subprocess.Popen(["ptolab", "watch", study, "--dir", str(work), "--edits", "1",
                                 "--interval", "0.05", "--cores", str(cores)],
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            while "watching" not in log.read_text():
                if proc.poll() is not None:
                    raise SystemExit(f"ptolab watch failed:\n{log.read_text()[-3000:]}")
                time.sleep(0.05)
            report = work / "results" / study / "report.html"
            before = report.stat().st_mtime_ns
            start = time.perf_counter()
            edit_knob(work / "configs" / "studies" / f"{study}.yaml")
            while report.stat().st_mtime_ns == before or "rebuilt" not in log.read_text():
                if proc.poll() is not None:
                    raise SystemExit(f"ptolab watch failed:\n{log.read_text()[-3000:]}")
                time.sleep(0.01)
            to_report = time.perf_counter() - start
            proc.wait(timeout=300)
            return to_report, time.perf_counter() - start
        finally:
            if proc.poll() is None:
                proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--study", default="multi_stitch")
    ap.add_argument("--keep", type=Path, default=None,
                    help="build in this folder and keep it; reused (no clean build) if built")
    ap.add_argument("--breakdown", action="store_true",
                    help="edit the knob once more and split that run's wall time")
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
        to_report, to_record = watch_edit(work, args.study, args.cores)
        print(f"{'knob edited under ptolab watch -> report':<40} {to_report:>7.2f}")
        print(f"{'  ... and recorded for snakemake':<40} {to_record:>7.2f}")
        if args.breakdown:
            edit_knob(work / "configs" / "studies" / f"{args.study}.yaml")
            print("knob edited again, wall seconds:")
            breakdown(work, args.cores, Path(stack.enter_context(tempfile.TemporaryDirectory())))


if __name__ == "__main__":
    main()
