from pathlib import Path

NAME = "report"
HELP = "parsed stages of a study -> report.html"


def add_arguments(p) -> None:
    p.add_argument("study", type=Path, help="study config file")
    p.add_argument("--stages-dir", type=Path, required=True,
                   help="folder holding <stage>/parsed/ for every stage")
    p.add_argument("--kernel", type=Path, default=None,
                   help="the study's kernel file (default: configs/kernels/<kernel> beside "
                        "the study's folder); gives the knob values each stage ran and the "
                        "advisor's --set lines")
    p.add_argument("--out", type=Path, required=True)


def run(args) -> int:
    from ..report.render import render_study
    render_study(args.study, args.stages_dir, args.out, args.kernel)
    return 0
