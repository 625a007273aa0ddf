"""How far a study report's times can be trusted: the documented figures the chip's model
was checked against, as ``ptolab validate`` last wrote them (docs/fidelity.json, beside
docs/fidelity.md).  A report of a chip the file does not cover says nothing."""
from __future__ import annotations

import json
from pathlib import Path

FIDELITY_FILE = Path(__file__).resolve().parents[2] / "docs" / "fidelity.json"


def _rows(figures: list[dict]) -> list[dict]:
    return [{**f, "ratio": f["predicted"] / f["documented"]} for f in figures
            if f.get("documented") and f.get("predicted")]


def for_hardware(name: str, path: Path | None = None) -> dict | None:
    """The fitted and held-out figures of chip ``name``, or None (no validation of it, or
    only a --quick one, which is no fidelity statement)."""
    try:
        data = json.loads(Path(path or FIDELITY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("hardware") != name or data.get("quick"):
        return None
    fitted, held = _rows(data.get("in_fit", [])), _rows(data.get("held_out", []))
    # each held-out figure's predictions over every fit validate made: a ratio far from 1
    # with a narrow span is a mechanism the model lacks, not a value the fit got wrong
    spans = {(c["case"], c["metric"]): c for c in data.get("held_out_refit_spread", [])
             if c.get("documented") and c.get("low") and c.get("high")}
    for r in held:
        c = spans.get((r["case"], r["metric"]))
        r["span"] = (c["low"] / c["documented"], c["high"] / c["documented"],
                     c.get("fits", 0)) if c else None
    if not fitted:
        return None
    worst = max(fitted, key=lambda r: abs(r["ratio"] - 1))
    return {"hardware": name, "procedure": data.get("procedure", ""), "fitted": fitted,
            "worst_fitted": worst, "held_out": held,
            "held_low": min((r["ratio"] for r in held), default=None),
            "held_high": max((r["ratio"] for r in held), default=None)}
