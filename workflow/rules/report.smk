# Reports read every parsed table of a stage, and the kernel file: the knob values each
# stage ran are the kernel's defaults with the stage's overrides.  The templates, the
# swimlane viewer and the report code are inputs too, and their content hash is a param:
# this Snakemake reruns on changed params, not on newer inputs, so editing a template or
# the report code re-renders the reports (nothing upstream).
from pipeline.workflow import report_assets_hash, report_templates

REPORT_ASSETS = [str(p) for p in report_templates()]
REPORT_ASSETS_HASH = report_assets_hash()


def index_studies(wildcards=None):
    """Every study config in PLAN's order: the workflow file's, then nightly-only ones."""
    return [str(sp.path) for sp in PLAN.studies.values()]


rule report:
    input:
        study=lambda w: PLAN.study(w.study).path,
        kernel=lambda w: PLAN.study(w.study).kernel_path,
        parsed=lambda w: PLAN.stage_files(w.study, "parsed/metrics.json"),
        tasks=lambda w: PLAN.stage_files(w.study, "parsed/tasks.parquet"),
        topo=lambda w: PLAN.stage_files(w.study, "parsed/topo.parquet"),
        phases=lambda w: PLAN.stage_files(w.study, "parsed/phases.parquet"),
        assets=REPORT_ASSETS,
    output:
        RESULTS + "/{study}/report.html",
    params:
        stages=lambda w: f"{RESULTS}/{w.study}",
        assets=REPORT_ASSETS_HASH,
    # INDEX_STUDIES (the Snakefile's, every study in PLAN's order) is not a param: a new
    # study in the workflow file reruns the index job, not every report
    shell:
        "ptolab report {input.study} --kernel {input.kernel} --stages-dir {params.stages} "
        "--out {output} --index {RESULTS}/index.html --index-studies {INDEX_STUDIES}"


# The index lists the studies in the workflow file's order and links the reports that
# exist.  Each report job rewrites it after its report (what the index shows of a study,
# its config, stages and metrics, is what that study's report depends on), so a knob edit
# runs no index job.  This rule writes it when it is missing, when the list of studies
# changes or when a template does; it does not wait for the reports, which refresh it as
# they finish once it exists (`ptolab index` and `ptolab report --index` take turns on a
# lock, so the last to render has seen every report written).
# `snakemake nightly` refreshes it too (workflow/rules/nightly.smk).
rule index:
    input:
        assets=REPORT_ASSETS,
    output:
        RESULTS + "/index.html",
    params:
        studies=lambda w: index_studies(),
        assets=REPORT_ASSETS_HASH,
    shell:
        "ptolab index {RESULTS} {INDEX_STUDIES} --out {output}"
