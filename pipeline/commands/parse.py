"""``ptolab parse RUN_DIR --out DIR``: a run folder's files -> tables + parsed metrics."""
import json
from pathlib import Path

NAME = "parse"
HELP = "a run folder's files -> tables (parquet) + parsed metrics"


def add_arguments(p) -> None:
    p.add_argument("run_dir", type=Path)
    p.add_argument("--out", type=Path, required=True,
                   help="folder for the tables and metrics.json (replaced as a whole)")


def run(args) -> int:
    from ..outdir import owned_folder
    from ..parse.run import parse_run
    with owned_folder(args.out, "parse") as fresh:
        parsed = parse_run(args.run_dir, fresh)
    print(json.dumps(parsed, indent=2))
    return 0
