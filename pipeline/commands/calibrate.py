import sys
from pathlib import Path

NAME = "calibrate"
HELP = ("fit a hardware's free parameters to every documented figure of the named studies "
        "(writes its .fit.toml; exit 1 and nothing written when the fit ends on a bound or "
        "stops at its budget before converging)")


def add_arguments(p) -> None:
    p.add_argument("config", type=Path, help="calibration file, e.g. configs/calibration/dav_2201.yaml")
    p.add_argument("--configs", type=Path, default=Path("configs"),
                   help="folder holding studies/, kernels/, hardware/ (default configs)")
    p.add_argument("--dry-run", action="store_true",
                   help="fit and print, but do not write the fit overlay")
    p.add_argument("--max-evaluations", type=int, default=None,
                   help="override the file's max_evaluations, the budget of each start's "
                        "search (a short trial fit: one that "
                        "stops before converging prints its values but writes nothing and "
                        "exits 1)")


def run(args) -> int:
    from simcore.spec.hardware import dotted_values, fit_overlay
    from simcore.spec.loader import read_mapping

    from ..calibrate import Problem, bound_failures, fit_problem, load_calibration, \
        stage_lines, start_summary, write_fit
    cal = load_calibration(args.config)
    problem = Problem(cal, args.configs)
    result = fit_problem(problem, max_evaluations=args.max_evaluations)
    state = "converged" if result.converged else "stopped at its budget, NOT converged"
    print(f"evaluations: {result.evaluations} ({state})  score (per study weight x mean "
          f"squared log-ratio, summed): {result.score:.5f}")
    print(f"  search: {start_summary(result)}")
    for p in cal.parameters:
        low, high = p.bounds
        if p.held:
            print(f"  {p.path} = {p.prior:g}  (held at its prior: {p.held})")
            continue
        print(f"  {p.path} = {result.values[p.path]:g}  (prior {p.prior:g}, "
              f"bounds {low:g}..{high:g})")
    for line in stage_lines(result.table):
        print(f"  {line}")
    overlay = fit_overlay(problem.hw_path)
    if result.on_bound:
        for line in bound_failures(result):
            print(f"ptolab calibrate: fit failed: {line}.", file=sys.stderr)
        print(f"Nothing written; {overlay} is unchanged.", file=sys.stderr)
        return 1
    in_place = dict(dotted_values(read_mapping(overlay))) if overlay.exists() else {}
    _compare_in_place(problem, cal, result, in_place, overlay)
    if not result.converged:
        # where a search cut short stopped is not what the figures ask for
        print(f"ptolab calibrate: the search stopped at its budget ({result.evaluations} "
              f"evaluations) before converging; raise max_evaluations in {args.config} (or "
              f"--max-evaluations). Nothing written; {overlay} is unchanged.", file=sys.stderr)
        return 1
    if not args.dry_run:
        before = set(in_place)
        write_fit(problem.hw_path, result.values, args.config.as_posix(), cal, result)
        print(f"Wrote {overlay} (merged over {problem.hw_path.name}, which is unchanged)")
        dropped = sorted(before - set(result.values))
        if dropped:
            print(f"  no longer fitted (back to their facts-file values): {', '.join(dropped)}")
    return 0


def _compare_in_place(problem, cal, result, in_place: dict, overlay: Path) -> None:
    """Say so when the values already in the overlay score better under the same facts and
    figures: the searches from the procedure's starts can settle in another minimum when a
    fact moves a little (docs/sources.md §3), and the user should know before replacing them."""
    if not in_place:
        return
    values = {p.path: in_place.get(p.path, p.prior) for p in cal.free}
    score = problem.score(values)
    print(f"  the values in {overlay.name} score {score:.5f} under these facts and figures")
    # better by more than 1 % of the fit's score and more than a rounding of the values
    if score < result.score - max(0.01 * result.score, 1e-4):
        print(f"ptolab calibrate: note: the values in place score better ({score:.5f}) than "
              f"this fit ({result.score:.5f}): the searches from its starts stopped elsewhere "
              f"(a trial with few evaluations, or another minimum). To keep them, rerun with "
              f"--dry-run; ptolab validate compares both.", file=sys.stderr)
