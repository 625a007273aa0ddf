"""A stage's task graph in numbers, and what changed in it from the stage before.

Leaf functions are matched across stages by what they compute (their ops' semantic
labels and opcodes, in order), not by name or hash: both are renumbered whenever the
graph changes.  A function of the previous stage whose ops now sit inside a larger one
was merged into it; one whose ops now spread over several was split.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

CORE = {0: "AIV", 1: "AIC"}


@dataclass
class Graph:
    dev_tasks: int
    leaf_tasks: int
    functions: dict[str, dict] = field(default_factory=dict)   # signature -> counts
    hashes: dict[str, list[str]] = field(default_factory=dict)  # signature -> leaf hashes
    # signature -> links to the source lines of its ops (sources.links), Python kernels only
    src: dict[str, dict] = field(default_factory=dict)

    @property
    def leaf_functions(self) -> int:
        return sum(f["functions"] for f in self.functions.values())


def _signature(ops: pl.DataFrame) -> pl.DataFrame:
    """func_hash -> 'label: OPCODE OPCODE, label2: OPCODE' (runs of one label joined)."""
    rows: dict[int, list[tuple[str, str]]] = {}
    for h, label, opcode in ops.sort("func_hash", "opmagic").select(
            "func_hash", "label", "opcode").iter_rows():
        rows.setdefault(h, []).append((label or "", opcode))
    out = []
    for h, seq in rows.items():
        parts: list[str] = []
        last = None
        for label, opcode in seq:
            if label != last:
                parts.append(f"{label}: {opcode}" if label else opcode)
                last = label
            else:
                parts[-1] += f" {opcode}"
        out.append((h, ", ".join(parts)))
    return pl.DataFrame(out, schema={"func_hash": pl.UInt64, "signature": pl.Utf8}, orient="row")


def read(parsed: Path) -> Graph | None:
    """The graph of one stage from parsed/topo.parquet (+ ops.parquet for what each computes)."""
    topo_path, ops_path = Path(parsed) / "topo.parquet", Path(parsed) / "ops.parquet"
    if not topo_path.exists():
        return None
    topo = pl.read_parquet(topo_path)
    per = topo.group_by(pl.col("leaf_hash").cast(pl.UInt64).alias("func_hash")).agg(
        pl.len().alias("tasks"), pl.col("core_type").first())
    if ops_path.exists():
        per = per.join(_signature(pl.read_parquet(ops_path)), on="func_hash", how="left")
    else:
        per = per.with_columns(signature=pl.lit(None, pl.Utf8))
    per = per.with_columns(signature=pl.coalesce(
        "signature", pl.format("leaf {}", pl.col("func_hash"))))
    functions: dict[str, dict] = {}
    hashes: dict[str, list[str]] = {}
    for sig, tasks, core, h in per.sort("signature", "func_hash").select(
            "signature", "tasks", "core_type", "func_hash").iter_rows():
        f = functions.setdefault(sig, {"functions": 0, "tasks": 0,
                                       "core": CORE.get(core, str(core))})
        f["functions"] += 1
        f["tasks"] += tasks
        hashes.setdefault(sig, []).append(str(h))
    return Graph(topo["seq_no"].n_unique(), topo.height, functions, hashes)


def add_sources(g: Graph, ops: pl.DataFrame | None, name: str) -> None:
    """Each signature's source lines: the union over its leaf functions' ops."""
    from . import sources
    by_leaf = sources.leaf_lines(ops, name)
    for sig, hs in g.hashes.items():
        lines = sorted({n for h in hs for n in by_leaf.get(h, [])})
        if lines:
            g.src[sig] = sources.links(lines, name)


def diff_sources(d: dict, prev: Graph | None, cur: Graph) -> None:
    for r in d["rows"]:
        r["src"] = cur.src.get(r["signature"]) or (prev.src.get(r["signature"]) if prev
                                                   else None)


def _ops(signature: str) -> Counter:
    out: Counter = Counter()
    for part in signature.split(", "):
        label, _, codes = part.rpartition(": ")
        out.update(f"{label}:{c}" for c in codes.split())
    return out


def _inside(small: Counter, big: Counter) -> bool:
    return all(big[k] >= v for k, v in small.items())


def diff(prev: Graph | None, cur: Graph | None) -> dict | None:
    """Rows per leaf function (matched by signature) and the merges and splits between."""
    if prev is None or cur is None:
        return None
    rows = []
    for sig in sorted(set(prev.functions) | set(cur.functions),
                      key=lambda s: (-(cur.functions.get(s) or prev.functions[s])["tasks"], s)):
        a, b = prev.functions.get(sig), cur.functions.get(sig)
        rows.append({"signature": sig, "core": (b or a)["core"],
                     "prev_tasks": a["tasks"] if a else None,
                     "tasks": b["tasks"] if b else None,
                     "prev_functions": a["functions"] if a else 0,
                     "functions": b["functions"] if b else 0})
    gone = [s for s in prev.functions if s not in cur.functions]
    new = [s for s in cur.functions if s not in prev.functions]
    merged, split = [], []
    for n in new:
        parts = [g for g in gone if _inside(_ops(g), _ops(n))]
        if len(parts) >= 2:
            merged.append({"into": n, "from": sorted(parts)})
    for g in gone:
        parts = [n for n in new if _inside(_ops(n), _ops(g))]
        if len(parts) >= 2:
            split.append({"from": g, "into": sorted(parts)})
    for r in rows:
        r["note"] = _note(r, merged, split)
    return {"dev_tasks": (prev.dev_tasks, cur.dev_tasks),
            "leaf_tasks": (prev.leaf_tasks, cur.leaf_tasks),
            "leaf_functions": (prev.leaf_functions, cur.leaf_functions),
            "rows": rows, "merged": merged, "split": split,
            "changed": any(r["prev_tasks"] != r["tasks"] or r["prev_functions"] != r["functions"]
                           for r in rows) or prev.dev_tasks != cur.dev_tasks}


def _note(row: dict, merged: list[dict], split: list[dict]) -> str:
    """What happened to one leaf function between the two stages, in words."""
    sig, a, b = row["signature"], row["prev_tasks"], row["tasks"]
    if a is None:
        m = next((m for m in merged if m["into"] == sig), None)
        s = next((s for s in split if sig in s["into"]), None)
        return (f"new: {len(m['from'])} functions merged into one" if m else
                f"new: split out of '{s['from']}'" if s else "new")
    if b is None:
        m = next((m for m in merged if sig in m["from"]), None)
        s = next((s for s in split if s["from"] == sig), None)
        return (f"merged into '{m['into']}'" if m else
                f"split into {len(s['into'])} functions" if s else "gone")
    if a == b:
        return "unchanged" if row["prev_functions"] == row["functions"] else \
            f"{row['prev_functions']} -> {row['functions']} functions, same leaf tasks"
    ratio = a / b if b else 0
    if b < a:
        return (f"{ratio:g} leaf tasks merged into one" if ratio == int(ratio)
                else f"{a - b} fewer leaf tasks")
    return (f"each leaf task split in {b / a:g}" if (b / a) == int(b / a)
            else f"{b - a} more leaf tasks")
