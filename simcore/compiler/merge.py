"""Breadth merge: several isomorphic leaf tasks of one root call become one.

- L1Reuse (Cube): tasks that load the same GM block of one operand share one
  load; on by default with an automatic count, set per isomorphic group by
  ``cube_l1_reuse_setting`` (count, or (count, side)).
- CubeNBuffer / vecNBuffer: ``cube_nbuffer_setting`` / ``vec_nbuffer_setting``
  merge N isomorphic tasks so their tiles pipeline (double buffering) and pay
  one head overhead.
Keys follow upstream: an int is the group's hashOrder index (-1 the default),
"DEFAULT", ``func{magic}_{order}`` for one group, or a semantic label whose
value replaces the group's (the largest if several labels match).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class MergeChoice:
    count: int
    side: str          # L1Reuse: "left" (A / L0A side), "right" (B side) or "auto"
    source: str        # which key decided it, for the swimlane hint


def choose(setting: dict[str, Any], order: int, func_key: str, labels: set[str],
           auto: int) -> MergeChoice:
    value, source = None, "auto"
    for key in (func_key, str(order), "DEFAULT", "-1"):
        if key in setting:
            value, source = setting[key], key
            break
    by_label = [setting[lb] for lb in sorted(labels) if lb in setting]
    if by_label:
        value = max(by_label, key=lambda v: v[0] if isinstance(v, (list, tuple)) else v)
        source = "label"
    if value is None:
        return MergeChoice(auto if auto is not None else 1, "auto", source)
    count, side = value if isinstance(value, (list, tuple)) else (value, "auto")
    return MergeChoice(max(int(count), 1), str(side).lower(), source)


def merged_index(group_keys: np.ndarray) -> np.ndarray:
    """New task index per old task, keeping first-appearance order."""
    _, first, inverse = np.unique(group_keys, return_index=True, return_inverse=True)
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.ravel()]
