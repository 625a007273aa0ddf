"""``ptolab compile KERNEL``: program.json, dyn_topo.txt and compile.json."""
from pathlib import Path

from ._common import add_kernel_arguments

NAME = "compile"
HELP = "kernel -> program.json, dyn_topo.txt, compile.json"


def add_arguments(p) -> None:
    add_kernel_arguments(p)
    p.add_argument("--out", type=Path, default=Path("."),
                   help="output folder (default: the current folder)")


def run(args) -> int:
    from simcore.spec.errors import ConfigError
    from simcore.spec.overrides import parse_assignments

    from ..runner import run_compile
    if args.out.exists() and not args.out.is_dir():
        raise ConfigError("is a file, not a folder. Give --out a folder path (it is created "
                          "if missing).", source=str(args.out))
    # compile.json marks files an earlier compile wrote; without it, a program.json or
    # dyn_topo.txt there is someone else's (a PyPTO run's, say) and is not overwritten
    theirs = [n for n in ("program.json", "dyn_topo.txt") if (args.out / n).exists()]
    if theirs and not (args.out / "compile.json").exists():
        raise ConfigError(f"holds {' and '.join(theirs)} that ptolab did not write (no "
                          f"compile.json beside them); give --out another folder, or move "
                          f"them away.", source=str(args.out))
    counts = run_compile(args.kernel, parse_assignments(args.sets), args.hardware, args.out)
    for key, value in counts.items():
        print(f"{key}: {value}")
    print(f"Wrote program.json, dyn_topo.txt, compile.json to {args.out.absolute()}")
    return 0
