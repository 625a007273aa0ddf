from pathlib import Path

from simcore.spec.overrides import parse_assignments

from ._common import add_kernel_arguments

NAME = "compile"
HELP = "kernel -> program.json, dyn_topo.txt, compile.json"


def add_arguments(p) -> None:
    add_kernel_arguments(p)
    p.add_argument("--out", type=Path, default=Path("."), help="output folder (default .)")


def run(args) -> int:
    from ..runner import run_compile
    counts = run_compile(args.kernel, parse_assignments(args.sets), args.hardware, args.out)
    for key, value in counts.items():
        print(f"{key}: {value}")
    return 0
