import json
from pathlib import Path

NAME = "parse"
HELP = "a run folder's files -> tables (parquet) + parsed metrics"


def add_arguments(p) -> None:
    p.add_argument("run_dir", type=Path)
    p.add_argument("--out", type=Path, required=True)


def run(args) -> int:
    from ..parse.run import parse_run
    print(json.dumps(parse_run(args.run_dir, args.out), indent=2))
    return 0
