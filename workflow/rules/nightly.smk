# Nightly regression check (docs/nightly.md).
#   snakemake -c2 nightly          build the nightly studies, compare with baselines/, write
#                                  results/nightly/{report.html,status.json,summary.txt}
#   snakemake -c2 nightly_stages   build the nightly studies only (to take a first baseline)
# The comparison never fails the workflow on a regression: Snakemake would delete the report
# of a failed job, and the report is what a regression needs. The verdict is in status.json;
# `ptolab nightly status` / `ptolab nightly run` turn it into exit code 0/1/2.
# It does fail (exit 2 from ptolab) when it cannot run, e.g. a study has no baseline.
import os
import shlex

from pipeline.nightly.plan import nightly_plan, with_studies

# NIGHTLY_CONFIG and NIGHTLY (configs/nightly.yaml, or None without it) come from the Snakefile,
# which needs the nightly studies' names before any rule is defined
try:
    NIGHTLY_PLAN = nightly_plan(Path("configs"), RESULTS, NIGHTLY) if NIGHTLY else None
except ConfigError as exc:
    sys.stderr.write(f"ptolab: error: {exc}\n")
    sys.exit(2)

if NIGHTLY_PLAN is not None:
    # The stage and report rules look studies up in PLAN when jobs are planned,
    # so handing them a plan that also knows the nightly studies builds those like any other.
    PLAN = with_studies(PLAN, NIGHTLY_PLAN)

NIGHTLY_DIR = RESULTS + "/nightly"


def nightly_inputs(relative):
    if NIGHTLY_PLAN is None:
        return []
    return [f for name in NIGHTLY_PLAN.studies for f in NIGHTLY_PLAN.stage_files(name, relative)]


def nightly_baselines(wildcards):
    """The baselines that exist (so editing one reruns the comparison); a missing one is
    reported by `ptolab nightly compare` with the command that creates it."""
    if NIGHTLY is None:
        return []
    return [p for s in NIGHTLY.studies if os.path.exists(p := f"{NIGHTLY.baselines}/{s}.yaml")]


localrules: nightly, nightly_stages, nightly_report, nightly_index


rule nightly:
    input:
        NIGHTLY_DIR + "/report.html",
        NIGHTLY_DIR + "/status.json",
        NIGHTLY_DIR + "/index.refreshed",


rule nightly_stages:
    input:
        str(NIGHTLY_CONFIG),
        NIGHTLY_PLAN.reports() if NIGHTLY_PLAN else [],


rule nightly_report:
    input:
        str(NIGHTLY_CONFIG),
        nightly_baselines,
        nightly_inputs("parsed/metrics.json"),
        nightly_inputs("parsed/tasks.parquet"),
        nightly_inputs("parsed/topo.parquet"),
        nightly_inputs("compile/program.json"),
        nightly_inputs("run/merged_swimlane.json"),
        NIGHTLY_PLAN.reports() if NIGHTLY_PLAN else [],
    output:
        NIGHTLY_DIR + "/report.html",
        NIGHTLY_DIR + "/status.json",
        NIGHTLY_DIR + "/summary.txt",
    params:
        # a run id (e.g. a date) names the history entry; a new one reruns the comparison
        run=lambda w: ("--run-id " + shlex.quote(os.environ["PTOLAB_NIGHTLY_RUN"])
                       if os.environ.get("PTOLAB_NIGHTLY_RUN") else ""),
    shell:
        "ptolab nightly compare --configs configs --results {RESULTS} {params.run} --exit-zero"


# results/index.html lists every study and links the reports built so far (report.smk's
# index rule).  A nightly run rewrites it so the nightly studies' fresh reports and the
# nightly report are linked, without building the other studies the index rule waits on;
# the marker file is what Snakemake tracks.
rule nightly_index:
    input:
        index_studies,
        NIGHTLY_DIR + "/report.html",
        NIGHTLY_PLAN.reports() if NIGHTLY_PLAN else [],
        REPORT_ASSETS,
    output:
        touch(NIGHTLY_DIR + "/index.refreshed"),
    params:
        studies=lambda w: " ".join(shlex.quote(s) for s in index_studies()),
        assets=REPORT_ASSETS_HASH,
    shell:
        "ptolab index {RESULTS} {params.studies} --out {RESULTS}/index.html"
