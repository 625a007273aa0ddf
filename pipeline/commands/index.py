from pathlib import Path

NAME = "index"
HELP = "results/index.html linking every study report"


def add_arguments(p) -> None:
    p.add_argument("results", type=Path)
    p.add_argument("studies", nargs="+", type=Path,
                   help="study config files, in the order the index lists them")
    p.add_argument("--out", type=Path, required=True)


def run(args) -> int:
    from ..report.render import render_index
    render_index(args.results, args.studies, args.out)
    return 0
