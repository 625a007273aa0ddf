from pathlib import Path

NAME = "calibrate"
HELP = "fit a hardware's free parameters to a study's documented figures (writes its .fit.toml)"


def add_arguments(p) -> None:
    p.add_argument("config", type=Path, help="calibration file, e.g. configs/calibration/glm_stitch.yaml")
    p.add_argument("--configs", type=Path, default=Path("configs"),
                   help="folder holding studies/, kernels/, hardware/ (default configs)")
    p.add_argument("--dry-run", action="store_true",
                   help="fit and print, but do not write the fit overlay")


def run(args) -> int:
    from simcore.spec.hardware import dotted_values, fit_overlay
    from simcore.spec.loader import read_mapping

    from ..calibrate import fit, load_calibration, stage_lines, write_fit
    cal = load_calibration(args.config)
    result, problem = fit(cal, args.configs)
    print(f"evaluations: {result.evaluations}  score (sum of squared log-ratios): "
          f"{result.score:.5f}")
    for path, value in result.values.items():
        print(f"  {path} = {value:g}")
    for line in stage_lines(result.table, cal.metrics):
        print(f"  {line}")
    if not args.dry_run:
        overlay = fit_overlay(problem.hw_path)
        before = set(dict(dotted_values(read_mapping(overlay)))) if overlay.exists() else set()
        write_fit(problem.hw_path, result.values, args.config.as_posix(), cal, result)
        print(f"Wrote {overlay} (merged over {problem.hw_path.name}, which is unchanged)")
        dropped = sorted(before - set(result.values))
        if dropped:
            print(f"  no longer fitted (back to their facts-file values): {', '.join(dropped)}")
    return 0
