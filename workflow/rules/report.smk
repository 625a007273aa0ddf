# Reports read every parsed table of a stage.  The templates and the swimlane viewer are
# inputs too, and their content hash is a param: this Snakemake reruns on changed params,
# not on newer inputs, so editing a template re-renders the reports (nothing upstream).
import hashlib

REPORT_ASSETS = sorted(str(p) for p in (Path(workflow.main_snakefile).parent / "reports").rglob("*")
                       if p.is_file())
REPORT_ASSETS_HASH = hashlib.sha256(b"".join(Path(p).read_bytes() for p in REPORT_ASSETS)).hexdigest()


rule report:
    input:
        study=lambda w: PLAN.study(w.study).path,
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
        "ptolab report {input.study} --stages-dir {params.stages} --out {output}"


rule index:
    input:
        studies=[sp.path for sp in PLAN.studies.values()],
        reports=PLAN.reports(),
        assets=REPORT_ASSETS,
    output:
        RESULTS + "/index.html",
    params:
        assets=REPORT_ASSETS_HASH,
    shell:
        "ptolab index {RESULTS} {input.studies} --out {output}"
