# ptolab workflow: one job per {study}/{stage} (compile -> simulate -> parse), then reports.
# Config is validated up front (pipeline.workflow); rules live in workflow/rules/.
import sys
import threading
from pathlib import Path

from simcore.spec.errors import ConfigError
from pipeline.workflow import load_plan

configfile: "configs/workflow.yaml"

try:
    # the memo keeps studies validated by an earlier run whose files are unchanged
    PLAN = load_plan(Path("configs"), config, memo=Path(".snakemake/ptolab/plan.pickle"))
except ConfigError as exc:
    sys.stderr.write(f"ptolab: error: {exc}\n")
    sys.exit(2)

RESULTS = PLAN.results
STAGE = RESULTS + "/{study}/{stage}"

wildcard_constraints:
    study="[A-Za-z0-9_][A-Za-z0-9_.-]*",
    stage="[A-Za-z0-9_][A-Za-z0-9_.-]*",


rule all:
    input:
        PLAN.reports(),
        f"{RESULTS}/index.html",


def hardware_fit(w):
    """The study chip's fit overlay, if it has one: a refit reruns the stages."""
    overlay = PLAN.study(w.study).fit_path
    return [str(overlay)] if overlay is not None else []


include: "workflow/rules/import.smk"
include: "workflow/rules/stage.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/nightly.smk"


def _drop_rescheduling_timers():
    """Snakemake's job rate limit (--max-jobs-per-timespan, 100 jobs per 1 s by default) starts
    a 1-s timer each time its scheduler waits; the last one, a non-daemon thread, held the
    process a second after the last job.  Once the workflow has ended nothing is left to
    schedule, so the pending timers are cancelled and snakemake exits at once."""
    for thread in threading.enumerate():
        if (isinstance(thread, threading.Timer)
                and "_schedule_reevalutation" in getattr(thread.function, "__qualname__", "")):
            thread.cancel()


onsuccess:
    _drop_rescheduling_timers()


onerror:
    _drop_rescheduling_timers()
