# ptolab workflow: one job per {study}/{stage} (compile -> simulate -> parse), then reports.
# Config is validated up front (pipeline.workflow); rules live in workflow/rules/.
import sys
from pathlib import Path

from simcore.spec.errors import ConfigError
from simcore.spec.hardware import fit_overlay
from pipeline.workflow import load_plan

configfile: "configs/workflow.yaml"

try:
    PLAN = load_plan(Path("configs"), config)
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
    overlay = fit_overlay(PLAN.study(w.study).hardware_path)
    return [str(overlay)] if overlay.exists() else []


include: "workflow/rules/import.smk"
include: "workflow/rules/stage.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/nightly.smk"
