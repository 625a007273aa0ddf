from pathlib import Path

NAME = "calibrate"
HELP = "fit a hardware file's free parameters to a study's documented figures"


def add_arguments(p) -> None:
    p.add_argument("config", type=Path, help="calibration file, e.g. configs/calibration/glm_stitch.yaml")
    p.add_argument("--configs", type=Path, default=Path("configs"),
                   help="folder holding studies/, kernels/, hardware/ (default configs)")
    p.add_argument("--dry-run", action="store_true",
                   help="fit and print, but do not rewrite the hardware file")


def run(args) -> int:
    from ..calibrate import fit, load_calibration, write_back
    cal = load_calibration(args.config)
    result, problem = fit(cal, args.configs)
    print(f"evaluations: {result.evaluations}  score (sum of squared log-ratios): "
          f"{result.score:.5f}")
    for path, value in result.values.items():
        print(f"  {path} = {value:g}")
    for row in result.table:
        cells = "  ".join(f"{m}: {row[m]:.1f} (documented {row['documented_' + m]:g}, "
                          f"{100 * (row[m] / row['documented_' + m] - 1):+.1f}%)"
                          for m in cal.metrics)
        print(f"  {row['stage']}: {cells}")
    if not args.dry_run:
        write_back(problem.hw_path, result.values,
                   f"ptolab calibrate {args.config.as_posix()} (score {result.score:.4f})")
        print(f"Updated {problem.hw_path}")
    return 0
