# ptolab workflow: one job per {study}/{stage} (compile -> simulate -> parse), then reports.
# Config is validated up front (pipeline.workflow); rules live in workflow/rules/.
import re
import shlex
import sys
from pathlib import Path

from simcore.spec.errors import ConfigError
from pipeline.nightly.config import load_nightly
from pipeline.workflow import drop_rescheduling_timers, load_plan
from simcore.spec.loader import read_mapping

WORKFLOW_FILE = "configs/workflow.yaml"
try:
    # Snakemake's own parse of a broken file names neither line nor column
    read_mapping(Path(WORKFLOW_FILE))
except ConfigError as exc:
    sys.stderr.write(f"ptolab: error: {exc}\n")
    sys.exit(2)

configfile: WORKFLOW_FILE

try:
    # the memo keeps studies validated by an earlier run whose files are unchanged
    PLAN = load_plan(Path("configs"), config, memo=Path(".snakemake/ptolab/plan.pickle"))
except ConfigError as exc:
    sys.stderr.write(f"ptolab: error: {exc}\n")
    sys.exit(2)

RESULTS = PLAN.results
STAGE = RESULTS + "/{study}/{stage}"

# A study's rules match only the studies built (the workflow file's, and the nightly ones
# workflow/rules/nightly.smk adds), so results/nightly/ is never taken for a study and a
# report asked of any other name goes to rule unknown_study, which says what to do.
NIGHTLY_CONFIG = Path("configs/nightly.yaml")
try:
    # without the file the default workflow still runs; `nightly` then names the missing file
    NIGHTLY = load_nightly(NIGHTLY_CONFIG) if NIGHTLY_CONFIG.exists() else None
    KNOWN_STUDIES = "|".join(re.escape(name) for name in
                             [*PLAN.studies, *(NIGHTLY.studies if NIGHTLY else [])])
except ConfigError as exc:
    sys.stderr.write(f"ptolab: error: {exc}\n")
    sys.exit(2)

wildcard_constraints:
    study=KNOWN_STUDIES or "(?!)",
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

rule unknown_study:
    output:
        RESULTS + "/{unknown}/report.html",
    wildcard_constraints:
        unknown=f"(?!(?:{KNOWN_STUDIES}|nightly)/)[A-Za-z0-9_][A-Za-z0-9_.-]*",
    params:
        message=lambda w: PLAN.unknown_study_error(w.unknown),
    localrule: True
    shell:
        "echo ptolab: error: {params.message:q} >&2; exit 2"


# Snakemake's job rate limit keeps a 1-s timer thread pending after the last job; dropping
# it when the workflow ends lets snakemake exit then, not a second later (pipeline.workflow).
onsuccess:
    drop_rescheduling_timers()


onerror:
    drop_rescheduling_timers()
