"""``ptolab nightly``: the regression check, for a workflow rule and for automation.

- ``compare``: compare the built nightly studies with their baselines, write
  ``results/nightly/report.html``, ``status.json``, ``summary.txt`` and a history
  entry; print one paragraph; exit 0 (no regression), 1 (regression) or 2
  (could not run).  ``--exit-zero`` keeps a regression from failing the caller:
  the Snakemake rule uses it, because Snakemake deletes the outputs of a failed
  job and the report is what a regression needs most.
- ``status``: reprint the last comparison and return its exit code.
- ``run``: ``snakemake nightly`` then ``status``, as one command with the 0/1/2
  contract (a failed workflow is 2, never a stale 0).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

NAME = "nightly"
HELP = "nightly regression check against baselines/ (exit 0 ok, 1 regression, 2 could not run)"
RUN_ENV = "PTOLAB_NIGHTLY_RUN"     # the run id the Snakemake rule passes on
REPO_SNAKEFILE = Path(__file__).resolve().parents[2] / "Snakefile"


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="action", required=True)
    cmp_ = sub.add_parser("compare", help="compare built results with the baselines")
    cmp_.add_argument("--configs", type=Path, default=Path("configs"))
    cmp_.add_argument("--results", type=Path, default=None,
                      help="results folder (default: configs/workflow.yaml's 'results')")
    cmp_.add_argument("--run-id", default=None,
                      help=f"name of this run in the history, e.g. a date (default: ${RUN_ENV} "
                           f"or the next counter)")
    cmp_.add_argument("--exit-zero", action="store_true",
                      help="exit 0 on a regression too (the verdict stays in status.json)")
    st = sub.add_parser("status", help="print the last comparison, exit with its code")
    st.add_argument("--results", type=Path, default=Path("results"))
    rn = sub.add_parser("run", help="snakemake nightly, then status (0/1/2)")
    rn.add_argument("-c", "--cores", default="2")
    rn.add_argument("--profile", default=None, help="a Snakemake profile, e.g. for a cluster")
    rn.add_argument("--run-id", default=None, help="name of this run in the history")
    rn.add_argument("--results", type=Path, default=Path("results"))
    rn.add_argument("--keep-results", action="store_true",
                    help="let Snakemake skip up-to-date jobs (default: rebuild the nightly "
                         "studies, since Snakemake does not see ptolab's own code change)")


def _compare(args) -> int:
    from ..nightly.run import run_nightly
    outcome = run_nightly(args.configs, args.results, args.run_id or os.environ.get(RUN_ENV))
    print(outcome.summary)
    return 0 if args.exit_zero else outcome.exit_code


def _status(args) -> int:
    path = args.results / "nightly" / "status.json"
    if not path.exists():
        print(f"ptolab nightly: could not run: no {path}; the comparison has not run "
              f"(snakemake -c2 nightly).")
        return 2
    status = json.loads(path.read_text(encoding="utf-8"))
    print(status["summary"])
    return int(status["exit_code"])


def _run(args) -> int:
    # Snakemake under this interpreter: it finds executor plugins among its own
    # interpreter's packages, so a profile's plugin installed beside ptolab is found even
    # where the ``snakemake`` on the PATH is another Python's
    cmd = [sys.executable, "-m", "snakemake", "-s",
           str(REPO_SNAKEFILE if not Path("Snakefile").exists() else Path("Snakefile")),
           "nightly"]
    cmd += ["--profile", args.profile] if args.profile else ["-c", str(args.cores)]
    if not args.keep_results:
        cmd.append("--forceall")
    env = dict(os.environ, **({RUN_ENV: args.run_id} if args.run_id else {}))
    status = args.results / "nightly" / "status.json"
    status.unlink(missing_ok=True)   # a failed run must not leave last night's verdict
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    if proc.returncode != 0 or not status.exists():
        tail = "\n".join(proc.stdout.splitlines()[-25:])
        print(f"ptolab nightly: could not run: `{' '.join(cmd)}` exited {proc.returncode}. "
              f"Last lines of its output:\n{tail}")
        return 2
    return _status(args)


def run(args) -> int:
    return {"compare": _compare, "status": _status, "run": _run}[args.action](args)
