import sys
from pathlib import Path

NAME = "validate"
HELP = ("regenerate docs/fidelity.md: documented vs simulated, priors and fitted values, "
        "leave-one-case-out and physics checks (exit 1 when a check fails)")


def add_arguments(p) -> None:
    p.add_argument("config", type=Path, nargs="?",
                   default=Path("configs/calibration/dav_2201.yaml"),
                   help="calibration file (default configs/calibration/dav_2201.yaml)")
    p.add_argument("--configs", type=Path, default=Path("configs"),
                   help="folder holding studies/, kernels/, hardware/ (default configs)")
    p.add_argument("--out", type=Path, default=Path("docs/fidelity.md"),
                   help="report to write (default docs/fidelity.md; its figures also go to "
                        "the .json beside it, which study reports quote)")
    p.add_argument("--quick", action="store_true",
                   help="a few evaluations per fit (a smoke run, not a fidelity statement)")


def run(args) -> int:
    from ..calibrate import fidelity_summary, load_calibration, render_fidelity, run_validation
    from ..emit.atomic import write_json, write_text
    cal = load_calibration(args.config)
    result = run_validation(cal, args.config.as_posix(), args.configs, quick=args.quick)
    write_text(args.out, render_fidelity(result))
    # beside it, the figures the study reports quote (pipeline/report/fidelity.py)
    summary = args.out.with_suffix(".json")
    write_json(summary, fidelity_summary(result))
    print(f"Wrote {args.out} and {summary}")
    for line in result.failures:
        print(f"ptolab validate: {line}", file=sys.stderr)
    for line in result.unconverged:
        print(f"ptolab validate: not converged: {line}", file=sys.stderr)
    return 1 if result.failures else 0
