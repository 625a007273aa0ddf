"""From an op to the Python line that wrote it.

A kernel imported by ``ptolab import`` gives each op the source line that made it (the
config's ``src`` field); the compiler hands it to the program's ops (upstream's ``file`` and
``line`` op fields) and the parser keeps it in ``ops.parquet``.  The report shows
``file.py:LINE`` next to leaf functions and tasks, and the kernel file itself, one anchor per
line, so a link needs nothing but the report file (no network, no other file).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

# a link shows this many lines of one leaf function, then how many more there are
SHOWN_LINES = 6
_HEADER = re.compile(r"^# Imported by `ptolab import` from (?P<path>.+?) \(sha256 "
                     r"(?P<sha>[0-9a-f]{64})\)")
# references to tasks and leaf functions in the advisor's text
_TASK = re.compile(r"\b\d+-\d+-\d+-\d+-\d+\([^()\s]*\)")
_LEAF = re.compile(r"\bleaf (\d+)\b")
_FUNC = re.compile(r"\bfunction (\w+_leaf\d+)\b")


@dataclass
class KernelSource:
    """The kernel file as the report shows it."""
    name: str                    # the file name the ops' src fields use
    path: str                    # where the report read it, as given
    lines: list[str]
    marked: dict[int, list[str]] = field(default_factory=dict)   # line -> what it wrote
    stale: bool = False          # the file changed after the config was imported


def anchor(line: int) -> str:
    return f"src-L{line}"


def _header(kernel: Path | None) -> tuple[str, str] | None:
    """(source path, sha256) from an imported config's first line: which file to show and
    whether it is still the one imported.  The op lines themselves come from src fields."""
    if kernel is None or not Path(kernel).is_file():
        return None
    with open(kernel, encoding="utf-8") as f:
        m = _HEADER.match(f.readline())
    return (m["path"], m["sha"]) if m else None


def find(study, study_path: Path, kernel: Path | None) -> KernelSource | None:
    """The study's Python kernel file (configs/<file> of ``kernel: FILE.py:FUNCTION``), or
    the file an imported kernel config names; None for a kernel written as a config."""
    head = _header(kernel)
    path = shown = None
    py = getattr(study, "python_kernel", None)
    if py is not None:
        file = Path(py[0])
        configs = Path(study_path).resolve().parent.parent
        path = file if file.is_absolute() else configs / file
        # shown as the study names it, under its configs folder: the report of the same
        # study built in another checkout is the same file
        shown = file if file.is_absolute() else Path(configs.name) / file
    elif head is not None:
        path = shown = Path(head[0])
        if not path.is_absolute() and kernel is not None and not path.exists():
            path = Path(kernel).parent / path
    if path is None or not path.is_file():
        return None
    data = path.read_bytes()
    stale = head is not None and hashlib.sha256(data).hexdigest() != head[1]
    return KernelSource(path.name, shown.as_posix(), data.decode("utf-8", "replace")
                        .splitlines(), stale=stale)


def _line(src: str | None, name: str | None) -> int | None:
    if not src:
        return None
    file, _, line = src.rpartition(":")
    if not line.isdigit() or (name is not None and file != name):
        return None
    return int(line)


def leaf_lines(ops: pl.DataFrame | None, name: str | None = None) -> dict[str, list[int]]:
    """Leaf function (by hash and by name) -> the distinct source lines of its ops, in op
    order.  Ops from another file than ``name`` (when given) are left out."""
    if ops is None or "src" not in ops.columns:
        return {}
    out: dict[str, list[int]] = {}
    for h, fname, src in ops.sort("func_hash", "opmagic").select(
            "func_hash", "func_name", "src").iter_rows():
        line = _line(src, name)
        if line is None:
            continue
        for key in (str(h), fname):
            lines = out.setdefault(key, [])
            if line not in lines:
                lines.append(line)
    return out


def links(lines: list[int], name: str) -> dict:
    """What a template draws for a list of lines: up to SHOWN_LINES links and a count."""
    shown = sorted(lines)[:SHOWN_LINES]
    return {"name": name, "lines": [{"line": n, "anchor": anchor(n), "text": f"{name}:{n}"}
                                    for n in shown],
            "more": max(len(lines) - len(shown), 0)}


def mark(source: KernelSource, ops: pl.DataFrame | None) -> None:
    """Note on each source line which ops it wrote (the view's hover text)."""
    if ops is None or "src" not in ops.columns:
        return
    for opcode, label, src in ops.select("opcode", "label", "src").unique().sort(
            "src", "opcode", "label").iter_rows():
        line = _line(src, source.name)
        if line is None or line > len(source.lines):
            continue
        what = f"{opcode}" + (f" ({label})" if label else "")
        seen = source.marked.setdefault(line, [])
        if what not in seen:
            seen.append(what)


def task_leaves(tasks: pl.DataFrame | None, topo: pl.DataFrame | None,
                names: set[str]) -> dict[str, str]:
    """Task name -> leaf function hash, for the names asked only."""
    if tasks is None or topo is None or not names or "leaf_hash" not in topo.columns:
        return {}
    hit = tasks.filter(pl.col("name").is_in(sorted(names))).select("name", "seq_no", "task_id")
    if not hit.height:
        return {}
    joined = hit.join(topo.select("seq_no", "task_id", pl.col("leaf_hash").cast(pl.Utf8)),
                      on=["seq_no", "task_id"], how="left")
    return {n: h for n, h in joined.select("name", "leaf_hash").iter_rows() if h is not None}


def references(text: str) -> list[tuple[str, str]]:
    """(what the text says, kind) for every task, leaf hash and leaf function it names."""
    out = [(m.group(0), "task") for m in _TASK.finditer(text)]
    out += [(m.group(1), "leaf") for m in _LEAF.finditer(text)]
    out += [(m.group(1), "leaf") for m in _FUNC.finditer(text)]
    return out


def finding_sources(findings: list[dict], by_leaf: dict[str, list[int]], name: str,
                    tasks: pl.DataFrame | None, topo: pl.DataFrame | None) -> None:
    """Give every finding (folded ones too) ``sources``: each op it names with its lines."""
    def walk(fs):
        for f in fs:
            yield f
            yield from walk(f.get("folded") or [])

    every = list(walk(findings))
    texts = {id(f): " ".join(str(f.get(k, "")) for k in ("title", "evidence", "action"))
             for f in every}
    names = {r for t in texts.values() for r, kind in references(t) if kind == "task"}
    leaf_of = task_leaves(tasks, topo, names)
    for f in every:
        out, seen = [], set()
        for ref, kind in references(texts[id(f)]):
            leaf = leaf_of.get(ref) if kind == "task" else ref
            lines = by_leaf.get(leaf or "")
            if lines and ref not in seen:
                seen.add(ref)
                out.append({"ref": ref if kind == "task" else
                            (f"leaf {ref}" if ref.isdigit() else ref), **links(lines, name)})
        f["sources"] = out


def with_codes(tasks: pl.DataFrame, topo: pl.DataFrame | None, by_leaf: dict[str, list[int]],
               name: str) -> tuple[pl.DataFrame, list[str]]:
    """``tasks`` with a ``code`` column for the swimlane: an index into the returned table
    of source texts ("softmax.py:16, 17"); index 0 is "no source line"."""
    texts = [""]
    if topo is None or "leaf_hash" not in topo.columns or not by_leaf or tasks.height == 0:
        return tasks, texts
    leaves = topo.select(pl.col("leaf_hash").cast(pl.Utf8)).unique().sort("leaf_hash")
    code = []
    for h in leaves["leaf_hash"].to_list():
        lines = sorted(by_leaf.get(h or "", []))
        text = f"{name}:{', '.join(map(str, lines))}" if lines else ""
        if text not in texts:
            texts.append(text)
        code.append(texts.index(text))
    table = leaves.with_columns(code=pl.Series(code, dtype=pl.Int64))
    keyed = topo.select("seq_no", "task_id", pl.col("leaf_hash").cast(pl.Utf8)).join(
        table, on="leaf_hash", how="left").drop("leaf_hash")
    out = tasks.join(keyed, on=["seq_no", "task_id"], how="left", maintain_order="left")
    return out.with_columns(pl.col("code").fill_null(0)), texts
