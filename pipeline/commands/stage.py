"""``ptolab stage``: one workflow stage in one process, compiled once.

Writes STAGE/compile/ (compile.json, program.json, dyn_topo.txt), STAGE/run/
(the simulator's files with swimlanes and DUMP_DEVICE_PERF on, metrics.json
its record) and STAGE/parsed/ (the tables and the parsed metrics.json).  The
stage folder is rebuilt aside and swapped in whole: the workflow owns it.
"""
from pathlib import Path

from ._common import add_kernel_arguments, add_race_argument, race_line

NAME = "stage"
HELP = "one workflow stage: compile + simulate + parse into STAGE/{compile,run,parsed}"


def add_arguments(p) -> None:
    add_kernel_arguments(p)
    p.add_argument("--rounds", type=int, default=1, help="kernel launches (default 1)")
    p.add_argument("--out", type=Path, required=True, help="the stage folder (replaced whole)")
    add_race_argument(p)
    p.add_argument("--drop-on-failure", action="store_true",
                   help="a failed build also removes the stage folder's earlier build (the "
                        "workflow's stage rule: Snakemake has already deleted its outputs)")


def run(args) -> int:
    from simcore.spec.errors import ConfigError
    from simcore.spec.overrides import parse_assignments

    from ..runner import run_stage
    if args.rounds < 1:
        raise ConfigError(f"--rounds must be >= 1, got {args.rounds}.")
    done = run_stage(args.kernel, parse_assignments(args.sets), args.hardware, args.out,
                     args.rounds, race=args.race, drop_on_failure=args.drop_on_failure)
    m = done["parsed"]
    print(f"kernel_us: {m.get('kernel_us')}  e2e_us: {m.get('e2e_us')}  "
          f"dev_tasks: {m.get('dev_tasks')}  leaf_tasks: {m.get('leaf_tasks')}")
    if args.race:
        print(race_line(m))
    print(f"Output: {args.out}")
    return 0
