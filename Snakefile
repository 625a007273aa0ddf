# ptolab workflow: one job per {study}/{stage} (compile -> simulate -> parse), then reports.
# Config is validated up front (pipeline.workflow); rules live in workflow/rules/.
import shlex
import sys
from pathlib import Path

from simcore.spec.errors import ConfigError
from pipeline.workflow import drop_rescheduling_timers, load_plan

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

# the study files the index lists (report.smk), once nightly.smk has added its studies to PLAN
INDEX_STUDIES = " ".join(shlex.quote(s) for s in index_studies())

# A target naming a study the plan does not hold (the workflow file's studies and the
# nightly ones) stops here with what to do, not with a traceback from an input function.
for _name in PLAN.unknown_targets([a for a in sys.argv[1:] if not a.startswith("-")]):
    sys.stderr.write(f"ptolab: error: {PLAN.unknown_study_error(_name)}\n")
    sys.exit(2)


# Snakemake's job rate limit keeps a 1-s timer thread pending after the last job; dropping
# it when the workflow ends lets snakemake exit then, not a second later (pipeline.workflow).
onsuccess:
    drop_rescheduling_timers()


onerror:
    drop_rescheduling_timers()
