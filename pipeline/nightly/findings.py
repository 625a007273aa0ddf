"""The stage's advisor findings, if the advisor exists.

``pipeline.report.advisor`` is written separately; the nightly shows its
findings beside each change but must not depend on it.  It is imported only
when needed, and any failure becomes a note in the report, never a failed run:
the findings explain a change, they are not what the nightly checks.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path

KEYS = ("rule", "title", "evidence", "guide_section", "severity")


@dataclass
class Findings:
    available: bool
    items: list[dict] = field(default_factory=list)
    note: str = ""


def _advise():
    try:
        module = importlib.import_module("pipeline.report.advisor")
    except ImportError:
        return None
    return getattr(module, "advise", None)


def stage_findings(stage_dir: Path) -> Findings:
    advise = _advise()
    if advise is None:
        return Findings(False, note="advisor not available (pipeline/report/advisor.py)")
    try:
        raw = advise(Path(stage_dir))
    except Exception as exc:   # noqa: BLE001 - a broken advisor must not stop the nightly
        return Findings(False, note=f"advisor failed: {type(exc).__name__}: {exc}")
    items = [{k: str(f.get(k, "")) for k in KEYS} for f in raw or [] if isinstance(f, dict)]
    return Findings(True, items)


def recorded(findings: Findings) -> list[dict] | None:
    """What a baseline keeps of the findings: enough to tell new ones from old."""
    if not findings.available:
        return None
    return [{"rule": f["rule"], "severity": f["severity"], "title": f["title"]}
            for f in findings.items]
