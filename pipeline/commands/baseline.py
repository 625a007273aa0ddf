"""``ptolab baseline update``: rewrite the nightly baselines, on purpose and out loud.

The nightly never writes a baseline.  This command does, from the parsed
results of the current tree, and prints what moved in each study so the
rewrite is never silent; ``--dry-run`` prints the same without writing.
"""
from __future__ import annotations

from pathlib import Path

NAME = "baseline"
HELP = "rewrite the nightly baselines (baselines/<study>.yaml) from the parsed results"


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="action", required=True)
    up = sub.add_parser("update", help="rewrite baselines from results/<study>/<stage>/parsed")
    up.add_argument("--study", action="append", default=[], metavar="S",
                    help="only this study (repeatable; default: every nightly study)")
    up.add_argument("--configs", type=Path, default=Path("configs"))
    up.add_argument("--results", type=Path, default=None,
                    help="results folder (default: configs/workflow.yaml's 'results')")
    up.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")


def _changes(old: dict | None, new: dict) -> str:
    """One line per study: what the rewrite changes, in metric terms."""
    if old is None:
        return "new baseline"
    moved = []
    for stage, summary in new["stages"].items():
        before = (old.get("stages") or {}).get(stage, {}).get("metrics", {})
        diff = [f"{m} {before.get(m)} -> {v}" for m, v in summary["metrics"].items()
                if before.get(m) != v]
        if stage not in (old.get("stages") or {}):
            moved.append(f"{stage}: new stage")
        elif diff:
            moved.append(f"{stage}: " + ", ".join(diff))
    gone = sorted(set(old.get("stages") or {}) - set(new["stages"]))
    moved += [f"{stage}: removed" for stage in gone]
    return "; ".join(moved) or "metrics unchanged; dev-task, leaf-function or pipe tables changed"


def run(args) -> int:
    from simcore.spec.errors import ConfigError
    from simcore.spec.study import load_workflow

    from ..nightly import baseline as bl
    from ..nightly.config import load_nightly
    from ..nightly.plan import nightly_plan

    cfg = load_nightly(args.configs / "nightly.yaml")
    results = args.results or Path(load_workflow(args.configs / "workflow.yaml").results)
    studies = args.study or list(cfg.studies)
    unknown = [s for s in studies if s not in cfg.studies]
    if unknown:
        raise ConfigError(f"--study {', '.join(unknown)} is not in the nightly set "
                          f"({', '.join(cfg.studies)}); add it to configs/nightly.yaml first.")
    plan = nightly_plan(args.configs, str(results), cfg)
    for name in studies:
        sp = plan.study(name)
        path = bl.path_for(Path(cfg.baselines), name)
        new = bl.build(sp, results)
        old = bl.read(Path(cfg.baselines), name) if path.exists() else None
        command = f"ptolab baseline update --study {name}"
        if old is not None and path.read_text(encoding="utf-8") == bl.dumps(new, command):
            print(f"{path}: unchanged")
            continue
        verb = "would write" if args.dry_run else "wrote"
        print(f"{verb} {path}: {_changes(old, new)}")
        if not args.dry_run:
            bl.write(path, new, command)
            bl.keep_swimlanes(sp, results, results / "nightly" / "baseline_runs")
    return 0
