"""``ptolab simulate KERNEL``: compile, simulate on the modeled NPU, write PyPTO's files."""
import sys
from pathlib import Path

from ._common import add_kernel_arguments, add_race_argument, race_line

NAME = "simulate"
HELP = "compile, simulate on the modeled NPU, write PyPTO's files"


def add_arguments(p) -> None:
    add_kernel_arguments(p)
    p.add_argument("--rounds", type=int, default=1, help="kernel launches (default 1)")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder, replaced as a whole (default "
                        "output/output_<timestamp>_<us>_<pid>/)")
    add_race_argument(p)


def run(args) -> int:
    from simcore.spec.errors import ConfigError
    from simcore.spec.overrides import parse_assignments

    from ..outdir import owned_folder
    from ..runner import default_output_dir, run_simulate
    if args.rounds < 1:
        raise ConfigError(f"--rounds must be >= 1, got {args.rounds}.")
    out = args.out or default_output_dir()
    with owned_folder(out, "simulate") as fresh:
        result = run_simulate(args.kernel, parse_assignments(args.sets), args.hardware, fresh,
                              rounds=args.rounds, race=args.race)
    sys.stdout.write(result.summary)
    m = result.metrics
    print(f"kernel_us: {_kernel_us(result)}  e2e_us: {m['e2e_us']:.2f}  "
          f"root_calls: {m['root_calls']}  dev_tasks: {m['dev_tasks']}  "
          f"leaf_tasks: {m['leaf_tasks']}")
    if args.race:
        print(race_line(m))
    print(f"Output: {out}")
    return 0


def _kernel_us(result) -> str:
    """The model's kernel time; the summary above is upstream's, computed from the files'
    counter stamps, so where whole ticks round it differently the line says which is which."""
    exact, ticked = f"{result.metrics['kernel_us']:.2f}", f"{result.summary_us:.2f}"
    if ticked == exact:
        return exact
    freq = result.hardware.aicpu.profile_freq_mhz
    return f"{exact} (the summary's {ticked}: the files' {freq:g} MHz stamps)"
