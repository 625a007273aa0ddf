"""Wall time of the two loops a user waits for: a clean workflow build and a knob edit.

    python benchmarks/workflow_loop.py [--cores 2] [--study multi_stitch]

Copies configs/ into a scratch folder and runs the real ``snakemake`` against the
repository's Snakefile there:

1. clean build of every default study (all reports and results/index.html);
2. a no-op rerun (nothing to do: the planning cost alone);
3. one knob edited in one study (``stitch_function_max_num`` of the study's last stage
   halved), then the rebuild of that stage, its report and the index.

Prints one row per step: seconds and how many jobs Snakemake ran.  Measure on an idle
machine; the figures are whole-process wall times and include Snakemake's start-up.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def snakemake(work: Path, cores: int) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run(["snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work),
                           f"-c{cores}"], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"snakemake failed:\n{proc.stderr[-3000:]}")
    done = re.findall(r"(\d+) of (\d+) steps \(100%\) done", proc.stderr)
    return elapsed, int(done[-1][0]) if done else 0


def edit_knob(study_file: Path) -> str:
    """Halve the last stage's stitch_function_max_num (or set it to 2); return its name."""
    data = yaml.safe_load(study_file.read_text(encoding="utf-8"))
    stage = data["stages"][-1]
    key = "runtime_options.stitch_function_max_num"
    current = stage.setdefault("set", {}).get(key, 4)
    stage["set"][key] = max(1, int(current) // 2)
    study_file.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False),
                          encoding="utf-8")
    return stage["name"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--study", default="multi_stitch")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copytree(REPO / "configs", work / "configs")
        print(f"{'step':<40} {'seconds':>8} {'jobs':>5}")
        for label, prepare in (("clean build (all default studies)", None),
                               ("no-op rerun", None),
                               ("one knob edited -> report", "edit")):
            if prepare == "edit":
                stage = edit_knob(work / "configs" / "studies" / f"{args.study}.yaml")
                label = f"knob edited ({args.study}/{stage})"
            seconds, jobs = snakemake(work, args.cores)
            print(f"{label:<40} {seconds:>8.1f} {jobs:>5}", flush=True)


if __name__ == "__main__":
    main()
