"""The knobs a stage ran with, and ``--set`` lines that run as printed for its kernel.

A stage runs its kernel file with the study's overrides written in; resolving them the
way ``ptolab simulate --set`` does gives the values it actually ran (defaults included).
The advisor's "Try" lines are built here and checked against the same parser, so a
suggestion names a key the kernel has and a value its validation accepts.
"""
from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simcore.spec import overrides as ov
from simcore.spec.errors import ConfigError
from simcore.spec.kernel import (REDUCE_OPS, CubeTile, CubeTileStmt, Kernel, OpStmt, TileStmt,
                                  walk)
from simcore.spec.loader import read_mapping, validate


def value_text(value: Any) -> str:
    """A knob value as --set takes it: compact JSON (a string stays a bare word)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def set_line(key: str, value: Any) -> str:
    """``--set KEY=VALUE``, quoted so a POSIX shell passes it through unchanged."""
    return "--set " + shlex.quote(f"{key}={value_text(value)}")


def lookup(kernel: Kernel, key: str) -> tuple[bool, Any]:
    """(the key exists in this kernel, its value) for a --set key."""
    group, _, rest = key.partition(".")
    if group in ov.OPTION_GROUPS:
        options = getattr(kernel.options, group)
        if rest in type(options).model_fields:
            return True, getattr(options, rest)
        return False, None
    if group == "tensors":
        name, _, attr = rest.rpartition(".")
        spec = kernel.tensors.get(name)
        if spec is None or attr not in ov.TENSOR_FIELDS:
            return False, None
        return True, getattr(spec, attr)
    table = {"params": kernel.params, "tiles": kernel.tiles}.get(group)
    if table is None or rest not in table:
        return False, None
    value = table[rest]
    return True, value.model_dump() if isinstance(value, CubeTile) else value


@dataclass
class KernelKnobs:
    """One stage's kernel as it ran: the raw file, the overrides and the validated model."""
    path: Path
    raw: dict
    sets: dict
    kernel: Kernel
    vec_tiles: dict[str, list[str]] = field(default_factory=dict)   # op label -> tile names
    cube_tiles: dict[str, list[str]] = field(default_factory=dict)
    reduce_axes: dict[str, dict[str, set[int]]] = field(default_factory=dict)
    # op label -> perm of its transpose: a transpose writes its tile's dims in that order
    transposes: dict[str, list[int]] = field(default_factory=dict)

    def value(self, key: str) -> Any:
        return lookup(self.kernel, key)[1]

    def check(self, line: str) -> None:
        """Run one printed ``--set`` line through the real parser; ConfigError if it fails."""
        words = shlex.split(line)
        if len(words) != 2 or words[0] != "--set":
            raise ConfigError(f"'{line}' is not one --set KEY=VALUE")
        key, value = ov.parse_assignment(words[1])
        data = ov.apply(self.raw, {**self.sets, key: value})
        kernel = validate(Kernel, data, f"{self.path} (with {line})", "kernel")
        if not lookup(kernel, key)[0] or not lookup(self.kernel, key)[0]:
            raise ConfigError(f"'{line}': the kernel {self.kernel.name} has no {key}")


def resolve(kernel_path: Path, sets: dict) -> KernelKnobs | None:
    """The kernel with a stage's overrides, as simulate resolves it; None if unreadable."""
    try:
        raw = read_mapping(Path(kernel_path))
        kernel = validate(Kernel, ov.apply(raw, dict(sets)), str(kernel_path), "kernel")
    except ConfigError:
        return None
    knobs = KernelKnobs(Path(kernel_path), raw, dict(sets), kernel)
    _index_tiles(knobs)
    return knobs


def _index_tiles(knobs: KernelKnobs) -> None:
    """Which named tile each labelled op runs under, and the axes each tile's reduces use."""
    vec = cube = None
    for stmt in walk(knobs.kernel.body):
        if isinstance(stmt, TileStmt):
            vec = stmt.set_vec_tile_shapes if isinstance(stmt.set_vec_tile_shapes, str) else None
        elif isinstance(stmt, CubeTileStmt):
            cube = stmt.set_cube_tile_shapes if isinstance(stmt.set_cube_tile_shapes, str) \
                else None
        elif isinstance(stmt, OpStmt) and stmt.label:
            tile = cube if stmt.op == "matmul" else vec
            table = knobs.cube_tiles if stmt.op == "matmul" else knobs.vec_tiles
            if tile is not None and tile not in table.setdefault(stmt.label, []):
                table[stmt.label].append(tile)
            if stmt.op == "transpose" and stmt.perm is not None:
                knobs.transposes[stmt.label] = list(stmt.perm)
            if tile is not None and stmt.axis is not None and stmt.op in REDUCE_OPS:
                knobs.reduce_axes.setdefault(tile, {}).setdefault(stmt.label, set()).add(stmt.axis)


# --- stage names against the knobs they ran ------------------------------------------------
def _numbers(value: Any) -> list[float] | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, list) and value and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return [float(v) for v in value]
    return None


def name_conflicts(name: str, knobs: dict[str, Any]) -> list[str]:
    """Sentences for every ``<word>_<number>`` in a stage name that a knob contradicts.

    A word matches a knob when it is one of the words of the knob's name (``stitch`` in
    ``runtime_options.stitch_function_max_num``, ``vec`` in ``tiles.vec``); the number
    must be the knob's value, or one of its dims for a tile.  Words no knob carries, or
    knobs that are not numbers, say nothing.
    """
    parts = name.split("_")
    out = []
    for i in range(len(parts) - 1):
        word, number = parts[i].lower(), parts[i + 1]
        if not re.fullmatch(r"[a-z][a-z0-9]*", word) or not re.fullmatch(r"\d+", number):
            continue
        hits = [k for k in knobs if word in re.split(r"[._]", k.lower())]
        if len(hits) != 1:
            continue
        key = hits[0]
        values = _numbers(knobs[key])
        if values is not None and float(number) not in values:
            out.append(f"the name says {word} {number} but the stage ran "
                       f"{key}={value_text(knobs[key])}")
    return out
