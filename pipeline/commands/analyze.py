"""``ptolab analyze FILE.json``: upstream ``machine_perf_trace.py analyze``.

The two argument errors keep upstream's wording (scripts around PyPTO grep for
them); every other bad input is a ConfigError paragraph like the rest of ptolab.
"""
import sys
from pathlib import Path

NAME = "analyze"
HELP = "per-round AICPU/AICore phase table of a machine_trace_perf_data_<N>.json file"


def add_arguments(p) -> None:
    # optional so that a missing argument gets upstream's own message, not argparse's
    p.add_argument("input", nargs="?", type=Path, metavar="FILE.json",
                   help="a machine_trace_perf_data_<N>.json file (not the run folder)")


def run(args) -> int:
    from ..parse.analyze import analyze, load_lanes, render
    if args.input is None:
        print("Error: analyze requires an input json path", file=sys.stderr)
        return 2
    if not args.input.exists():
        print(f"Error: path does not exist: {args.input}", file=sys.stderr)
        return 2
    lanes = load_lanes(args.input)
    print(f"Analyzing input: {args.input}")
    print()     # upstream prints each round's title after an empty line
    sys.stdout.write(render(analyze(lanes)))
    return 0
