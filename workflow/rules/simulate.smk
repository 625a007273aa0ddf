# The workflow turns on the switches a report needs: swimlanes (runtime_debug_mode=1)
# and AICPU/AICore phase data (DUMP_DEVICE_PERF=true).
rule simulate:
    input:
        compiled=STAGE + "/compile/compile.json",
        kernel=lambda w: PLAN.study(w.study).kernel_path,
        hardware=lambda w: PLAN.study(w.study).hardware_path,
        hardware_fit=hardware_fit,
    output:
        STAGE + "/run/metrics.json",
        STAGE + "/run/merged_swimlane.json",
        STAGE + "/run/tilefwk_L1_prof_data.json",
        STAGE + "/run/dyn_topo.txt",
        STAGE + "/run/machine_trace_perf_data_0.json",
    params:
        key=lambda w: PLAN.stage_key(w.study, w.stage),
        sets=lambda w: PLAN.set_args(w.study, w.stage),
        rounds=lambda w: PLAN.study(w.study).study.rounds,
        out=lambda w: f"{RESULTS}/{w.study}/{w.stage}/run",
    log:
        STAGE + "/logs/simulate.log",
    shell:
        "DUMP_DEVICE_PERF=true ptolab simulate {input.kernel} --hardware {input.hardware} "
        "{params.sets} --set debug_options.runtime_debug_mode=1 --rounds {params.rounds} "
        "--out {params.out} > {log} 2>&1"
