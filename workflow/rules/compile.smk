rule compile:
    input:
        kernel=lambda w: PLAN.study(w.study).kernel_path,
        hardware=lambda w: PLAN.study(w.study).hardware_path,
        hardware_fit=hardware_fit,
    output:
        STAGE + "/compile/compile.json",
        STAGE + "/compile/program.json",
        STAGE + "/compile/dyn_topo.txt",
    params:
        key=lambda w: PLAN.stage_key(w.study, w.stage),
        sets=lambda w: PLAN.set_args(w.study, w.stage),
        out=lambda w: f"{RESULTS}/{w.study}/{w.stage}/compile",
    log:
        STAGE + "/logs/compile.log",
    shell:
        "ptolab compile {input.kernel} --hardware {input.hardware} {params.sets} "
        "--out {params.out} > {log} 2>&1"
