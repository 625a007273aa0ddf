# Reports read every parsed table of a stage, and the kernel file: the knob values each
# stage ran are the kernel's defaults with the stage's overrides.  The templates, the
# swimlane viewer and the report code are inputs too, and their content hash is a param:
# this Snakemake reruns on changed params, not on newer inputs, so editing a template or
# the report code re-renders the reports (nothing upstream).
import hashlib

_ROOT = Path(workflow.main_snakefile).parent
REPORT_ASSETS = sorted(str(p) for p in (_ROOT / "reports").rglob("*") if p.is_file())
REPORT_CODE = sorted(str(p) for p in (_ROOT / "pipeline" / "report").glob("*.py"))
REPORT_ASSETS_HASH = hashlib.sha256(
    b"".join(Path(p).read_bytes() for p in REPORT_ASSETS + REPORT_CODE)).hexdigest()
# the default studies' reports; nightly.smk may add studies to PLAN after this point
DEFAULT_REPORTS = PLAN.reports()


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
    shell:
        "ptolab report {input.study} --kernel {input.kernel} --stages-dir {params.stages} "
        "--out {output}"


# The index lists the studies in the workflow file's order and links the reports that
# exist, so `snakemake nightly` can refresh it too (workflow/rules/nightly.smk).
rule index:
    input:
        studies=index_studies,
        reports=DEFAULT_REPORTS,
        assets=REPORT_ASSETS,
    output:
        RESULTS + "/index.html",
    params:
        assets=REPORT_ASSETS_HASH,
    shell:
        "ptolab index {RESULTS} {input.studies} --out {output}"
