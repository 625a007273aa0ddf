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
    p.add_argument("--index", type=Path, default=None, metavar="INDEX_HTML",
                   help="then rewrite the results index too if it exists (as `ptolab index` "
                        "does, its folder being the results folder), listing --index-studies")
    p.add_argument("--index-studies", type=Path, nargs="+", default=[], metavar="STUDY",
                   help="study config files, in the order the index lists them")


def run(args) -> int:
    from ..report.render import render_study
    if args.index is not None and not args.index_studies:
        from simcore.spec.errors import ConfigError
        raise ConfigError("--index needs --index-studies: the study files the index lists.")
    render_study(args.study, args.stages_dir, args.out, args.kernel)
    if args.index is not None:
        # in the same process: the index's imports are the report's, so it costs a render
        from .index import refresh
        refresh(args.index.parent, args.index_studies, args.index, if_present=True)
    return 0
