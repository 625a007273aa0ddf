rule report:
    input:
        study=lambda w: PLAN.study(w.study).path,
        parsed=lambda w: PLAN.stage_files(w.study, "parsed/metrics.json"),
        tasks=lambda w: PLAN.stage_files(w.study, "parsed/tasks.parquet"),
    output:
        RESULTS + "/{study}/report.html",
    params:
        stages=lambda w: f"{RESULTS}/{w.study}",
    shell:
        "ptolab report {input.study} --stages-dir {params.stages} --out {output}"


rule index:
    input:
        studies=[sp.path for sp in PLAN.studies.values()],
        reports=PLAN.reports(),
    output:
        RESULTS + "/index.html",
    shell:
        "ptolab index {RESULTS} {input.studies} --out {output}"
