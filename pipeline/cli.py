"""``ptolab``: the command line (DESIGN §3).

Every bad input ends as one paragraph on stderr and exit code 2, never a
traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from simcore.spec.errors import ConfigError
from simcore.spec.overrides import parse_assignments


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernel", type=Path, help="kernel config file (.toml or .yaml)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override an option, param or tile shape; value is JSON "
                        "(e.g. runtime_options.stitch_function_max_num=64)")
    p.add_argument("--hardware", default="dav_2201",
                   help="hardware name in configs/hardware or a path (default dav_2201)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ptolab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("compile", help="kernel -> program.json, dyn_topo.txt, compile.json")
    _add_common(p)
    p.add_argument("--out", type=Path, default=Path("."), help="output folder (default .)")

    p = sub.add_parser("simulate", help="compile, simulate on the modeled NPU, write PyPTO's files")
    _add_common(p)
    p.add_argument("--rounds", type=int, default=1, help="kernel launches (default 1)")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default output/output_<timestamp>_<us>_<pid>/)")

    p = sub.add_parser("parse", help="a run folder's files -> tables (parquet) + parsed metrics")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--out", type=Path, required=True)

    p = sub.add_parser("report", help="parsed stages of a study -> report.html")
    p.add_argument("study", type=Path, help="study config file")
    p.add_argument("--stages-dir", type=Path, required=True,
                   help="folder holding <stage>/parsed/ for every stage")
    p.add_argument("--out", type=Path, required=True)

    p = sub.add_parser("index", help="results/index.html linking every study report")
    p.add_argument("results", type=Path)
    p.add_argument("studies", nargs="+", type=Path, help="study config files")
    p.add_argument("--out", type=Path, required=True)
    return parser


def _compile(args) -> int:
    from .runner import run_compile
    counts = run_compile(args.kernel, parse_assignments(args.sets), args.hardware, args.out)
    for key, value in counts.items():
        print(f"{key}: {value}")
    return 0


def _simulate(args) -> int:
    from .runner import default_output_dir, run_simulate
    if args.rounds < 1:
        raise ConfigError(f"--rounds must be >= 1, got {args.rounds}.")
    out = args.out or default_output_dir()
    result = run_simulate(args.kernel, parse_assignments(args.sets), args.hardware, out,
                          rounds=args.rounds)
    sys.stdout.write(result.summary)
    m = result.metrics
    print(f"kernel_us: {m['kernel_us']:.2f}  e2e_us: {m['e2e_us']:.2f}  "
          f"root_calls: {m['root_calls']}  dev_tasks: {m['dev_tasks']}  "
          f"leaf_tasks: {m['leaf_tasks']}")
    print(f"Output: {out}")
    return 0


def _parse(args) -> int:
    from .parse.run import parse_run
    parsed = parse_run(args.run_dir, args.out)
    print(json.dumps(parsed, indent=2))
    return 0


def _report(args) -> int:
    from .report.render import render_study
    render_study(args.study, args.stages_dir, args.out)
    return 0


def _index(args) -> int:
    from .report.render import render_index
    render_index(args.results, args.studies, args.out)
    return 0


COMMANDS = {"compile": _compile, "simulate": _simulate, "parse": _parse, "report": _report,
            "index": _index}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as exc:
        print(f"ptolab: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
