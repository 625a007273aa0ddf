# One job per stage: `ptolab stage` compiles once, simulates with the switches a report needs
# (swimlanes: runtime_debug_mode=1; AICPU/AICore phase data: DUMP_DEVICE_PERF=true) and parses
# the run, in one process.  It rebuilds the whole stage folder aside and swaps it in, so no
# file of an earlier build survives (e.g. a perf file of a round count since lowered).
# On failure the job prints the end of its log (the compiler's own message, e.g. an OoO
# error), not only Snakemake's pointer to the log file.  With --drop-on-failure a failed
# build removes the stage folder under its lock: Snakemake deletes the declared outputs of
# a failed job, and the earlier run's other files (its record, perf files,
# run/metrics.json) must not stay behind looking complete.  Nor must the study's report,
# which shows the stage as it was and links its deleted files: it goes too, and the index is
# rewritten (ptolab index lists a study without a report as not built).
# The outputs named are the files other rules read (the report's tables, the nightly
# comparison's program and swimlane); the stage writes its other files in the same swap.
# Snakemake reads the metadata and mtime of every declared output of all ~70 stages each
# time it plans, so naming fewer makes every run, a no-op included, start sooner.
rule stage:
    input:
        kernel=lambda w: PLAN.study(w.study).kernel_path,
        hardware=lambda w: PLAN.study(w.study).hardware_path,
        hardware_fit=hardware_fit,
    output:
        STAGE + "/compile/program.json",
        STAGE + "/run/merged_swimlane.json",
        STAGE + "/parsed/metrics.json",
        STAGE + "/parsed/tasks.parquet",
        STAGE + "/parsed/topo.parquet",
        STAGE + "/parsed/phases.parquet",
    params:
        key=lambda w: PLAN.stage_key(w.study, w.stage),
        sets=lambda w: PLAN.set_args(w.study, w.stage),
        rounds=lambda w: PLAN.study(w.study).study.rounds,
        race=lambda w: "--race" if PLAN.study(w.study).study.race else "",
        out=lambda w: f"{RESULTS}/{w.study}/{w.stage}",
    log:
        RESULTS + "/{study}/logs/{stage}.log",
    shell:
        "ptolab stage {input.kernel} --hardware {input.hardware} {params.sets} "
        "--rounds {params.rounds} {params.race} --out {params.out} --drop-on-failure "
        "> {log} 2>&1 "
        "|| {{ rc=$?; echo 'ptolab stage {wildcards.study}/{wildcards.stage} failed:' >&2; "
        "tail -n 20 {log} >&2; "
        "report={RESULTS:q}/{wildcards.study}/report.html; "
        "if [ -f \"$report\" ]; then rm -f \"$report\"; "
        "echo 'its study report is removed (it showed the stage as it was before)' >&2; fi; "
        "ptolab index {RESULTS:q} {INDEX_STUDIES} --out {RESULTS:q}/index.html "
        "> /dev/null 2>&1; exit $rc; }}"
