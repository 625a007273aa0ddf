"""Concrete overrides the advisor suggests, as ``--set`` lines for one stage's kernel.

Each builder starts from the value the stage ran and changes it the way the guide's
advice says; every line is checked through the real ``--set`` parser and the kernel's
validation before it is offered, so an unusable suggestion is dropped, never printed.
"""
from __future__ import annotations


from typing import Any

from simcore.compiler.merge import vec_merge_mode
from simcore.spec.errors import ConfigError

from .knobs import KernelKnobs, set_line

STITCH = "runtime_options.stitch_function_max_num"
STITCH_MAX = 1024          # the option's upper bound (PyPTO's tile_fwk_config schema)


def checked(knobs: KernelKnobs | None, pairs: list[tuple[str, Any]]) -> list[str]:
    if knobs is None:
        return []
    out = []
    for key, value in pairs:
        line = set_line(key, value)
        try:
            knobs.check(line)
        except ConfigError:
            continue
        out.append(line)
    return out


def pow2_at_least(n: float) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def stitch_up(knobs: KernelKnobs | None, fill: float) -> list[str]:
    """At least double the stitch, and enough root calls per dev task to fill ``fill`` cores."""
    if knobs is None:
        return []
    cur = knobs.value(STITCH)
    return checked(knobs, [(STITCH, min(STITCH_MAX, max(2 * cur, pow2_at_least(fill))))]) \
        if cur < STITCH_MAX else []


def stitch_down(knobs: KernelKnobs | None, loop_bodies: int | None = None) -> list[str]:
    """Half of what the first dev task holds: the stitch, or all ``loop_bodies`` when the
    kernel has fewer, since a lower stitch that still exceeds them changes nothing."""
    if knobs is None:
        return []
    held = knobs.value(STITCH)
    if loop_bodies is not None:
        held = min(held, loop_bodies)
    return checked(knobs, [(STITCH, held // 2)]) if held > 1 else []


def _tile(knobs: KernelKnobs, label: str, table: str = "vec") -> tuple[str, list] | None:
    names = (knobs.vec_tiles if table == "vec" else knobs.cube_tiles).get(label, [])
    if len(names) != 1:
        return None
    dims = knobs.value(f"tiles.{names[0]}")
    if not isinstance(dims, list) or not all(isinstance(d, int) for d in dims):
        return None
    return names[0], dims


def tile_halved(knobs: KernelKnobs | None, label: str) -> list[str]:
    """Halve the largest axis of the label's vector tile that none of its reduces reduces."""
    found = _tile(knobs, label) if knobs else None
    if found is None:
        return []
    name, dims = found
    reduced = {a % len(dims) for axes in knobs.reduce_axes.get(name, {}).values() for a in axes}
    free = [i for i in range(len(dims)) if i not in reduced and dims[i] >= 2]
    if not free:
        return []
    axis = max(free, key=lambda i: (dims[i], -i))
    new = list(dims)
    new[axis] = dims[axis] // 2
    return checked(knobs, [(f"tiles.{name}", new)])


def tile_whole_axis(knobs: KernelKnobs | None, label: str, axis: int, full: int) -> list[str]:
    """The label's vector tile with its reduce axis spanning the whole axis."""
    found = _tile(knobs, label) if knobs else None
    if found is None:
        return []
    name, dims = found
    if not -len(dims) <= axis < len(dims):
        return []
    new = list(dims)
    new[axis] = full
    return checked(knobs, [(f"tiles.{name}", new)])


def output_tile(knobs: KernelKnobs | None, label: str) -> list[int] | None:
    """The shape of the tiles the label's ops write: their vector tile, with a transpose's
    dims in its perm's order (it is tiled over its input and writes swapped tiles)."""
    a = _tile(knobs, label) if knobs else None
    if a is None:
        return None
    perm = knobs.transposes.get(label)
    if perm is not None and sorted(perm) == list(range(len(a[1]))):
        return [a[1][p] for p in perm]
    return a[1]


def tile_like(knobs: KernelKnobs | None, down: str, up: str) -> list[str]:
    """Give the downstream label's vector tile the shape of the tiles upstream writes."""
    a, b = (output_tile(knobs, up), _tile(knobs, down)) if knobs else (None, None)
    if a is None or b is None or a == b[1] or len(a) != len(b[1]):
        return []
    return checked(knobs, [(f"tiles.{b[0]}", a)])


def merge(knobs: KernelKnobs | None, option: str, key: str, factor: int) -> list[str]:
    """Add ``key: factor`` to a merge setting (vec/cube NBuffer, L1Reuse), keeping the rest.

    A vec_nbuffer_setting of labels or int keys alone merges only tasks that share a
    producer or consumer (upstream's NBufferMerge, simcore/compiler/merge.py
    vec_merge_mode), which small independent tasks never do: such a setting also gets
    DEFAULT 1, so the label's count applies over the whole function and nothing else
    merges."""
    if knobs is None:
        return []
    current = dict(knobs.value(option) or {})
    if current.get(key) == factor:
        return []
    proposed = {**current, key: factor}
    if option.endswith("vec_nbuffer_setting") and vec_merge_mode(proposed) == "siblings":
        proposed = {"DEFAULT": 1, **proposed}
    return checked(knobs, [(option, proposed)])
