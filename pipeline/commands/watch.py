"""``ptolab watch``: the knob-edit loop, without Snakemake's start-up on every edit.

Runs ``snakemake`` once for the studies, then rebuilds, in this process, the stages and
reports an edit to configs/ changes (pipeline.watch).  Stop it with Ctrl-C.
"""
from pathlib import Path

NAME = "watch"
HELP = "build the studies, then rebuild what each config edit changes (Ctrl-C stops)"


def add_arguments(p) -> None:
    p.add_argument("studies", nargs="*", metavar="STUDY",
                   help="studies to build and watch (default: those of configs/workflow.yaml, "
                        "what a bare snakemake builds; a nightly study may be named)")
    p.add_argument("--dir", type=Path, default=Path("."), dest="workdir",
                   help="the folder holding configs/ and results/ (default: here)")
    p.add_argument("--cores", type=int, default=2,
                   help="cores for the snakemake runs (default 2)")
    p.add_argument("--interval", type=float, default=0.2,
                   help="seconds between looks at the files (default 0.2)")
    p.add_argument("--edits", type=int, default=None, metavar="N",
                   help="stop after N edits (default: run until interrupted)")


def run(args) -> int:
    import os
    import signal
    import sys

    from simcore.spec.errors import ConfigError

    from ..watch import Watch
    if args.interval <= 0:
        raise ConfigError(f"--interval must be > 0 seconds, got {args.interval}.")
    if not (args.workdir / "configs" / "workflow.yaml").exists():
        raise ConfigError("no configs/workflow.yaml here; run ptolab watch from the folder "
                          "you run snakemake in, or pass --dir.", source=str(args.workdir))
    # a terminal's kill is a Ctrl-C: the loop stops between jobs' files, never inside a swap
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # the jobs' paths are the rules' paths, relative to the workflow's folder (snakemake -d)
    os.chdir(args.workdir)
    watch = Watch(Path("."), args.studies, cores=args.cores,
                  say=lambda text: print(text, flush=True))
    try:
        watch.start()
        watch.loop(args.interval, args.edits)
    except KeyboardInterrupt:
        # Ctrl-C is how a watch ends, but it is an interrupt like any other command's: 130
        watch.finish_touch()
        print("ptolab watch: stopped.", file=sys.stderr)
        return 130
    return 0
