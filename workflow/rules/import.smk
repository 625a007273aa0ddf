# A study whose kernel is a PyPTO Python file (kernel: FILE.py:FUNCTION) runs the config
# `ptolab import` writes from it.  The source file is the input, so editing the kernel
# re-imports it and reruns the stages; the study's dims/args and ptolab's code are params.
from pipeline.workflow import code_version


rule import_kernel:
    input:
        source=lambda w: PLAN.study(w.study).kernel_source,
    output:
        RESULTS + "/{study}/kernel.yaml",
    params:
        args=lambda w: PLAN.study(w.study).import_args(),
        code=code_version(),
    log:
        RESULTS + "/{study}/logs/import.log",
    shell:
        "ptolab import {params.args} --out {output} > {log} 2>&1 "
        "|| {{ rc=$?; echo 'ptolab import for {wildcards.study} failed:' >&2; "
        "tail -n 20 {log} >&2; exit $rc; }}"
