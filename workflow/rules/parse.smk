rule parse:
    input:
        STAGE + "/run/metrics.json",
        STAGE + "/run/merged_swimlane.json",
        STAGE + "/run/dyn_topo.txt",
        STAGE + "/run/machine_trace_perf_data_0.json",
    output:
        STAGE + "/parsed/metrics.json",
        STAGE + "/parsed/tasks.parquet",
        STAGE + "/parsed/topo.parquet",
        STAGE + "/parsed/phases.parquet",
    params:
        run=lambda w: f"{RESULTS}/{w.study}/{w.stage}/run",
        out=lambda w: f"{RESULTS}/{w.study}/{w.stage}/parsed",
    log:
        STAGE + "/logs/parse.log",
    shell:
        "ptolab parse {params.run} --out {params.out} > {log} 2>&1"
