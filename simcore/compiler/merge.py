"""Breadth merge: several isomorphic leaf tasks of one root call become one.

- L1Reuse (Cube): a task joins the group that last loaded one of its GM blocks, which is
  then loaded once (build.py ``_l1_reuse_groups``); on by default with an automatic count
  (build.py ``_auto_l1_reuse_count``), set
  per isomorphic group by ``cube_l1_reuse_setting`` (count, or (count, side)); a merged
  task copies at most ``mg_copyin_upper_bound`` bytes into L1.
- CubeNBuffer / vecNBuffer: ``cube_nbuffer_setting`` / ``vec_nbuffer_setting``
  merge N isomorphic tasks so their tiles pipeline (double buffering) and pay
  one head overhead.
Keys follow upstream: an int is the group's hashOrder index (-1 the default),
"DEFAULT", ``func{magic}_{order}`` for one group, or a semantic label whose
value replaces the group's (the largest if several labels match).  Which kinds of key a
vec_nbuffer_setting has also decides which tasks may merge (``vec_merge_mode``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..spec.options import FUNC_KEY


@dataclass(frozen=True)
class MergeChoice:
    count: int
    side: str          # L1Reuse: "left" (A / L0A side), "right" (B side) or "auto"
    source: str        # which key decided it, for the swimlane hint


def choose(setting: dict[str, Any], order: int, func_key: str, labels: set[str],
           auto: int) -> MergeChoice:
    """The count and L1Reuse side a setting gives one leaf function.  The count comes from
    the first key of func key, hashOrder, DEFAULT, -1 that the setting has (a matching label
    replaces it, the largest if several); the side from the first of them, or the label,
    that names left or right: upstream keeps sides in a map of their own
    (``DecodeL1ReuseSide`` in l1_copy_reuse.cpp at 883e7dfb), so a plain count beside
    ``DEFAULT: (4, "right")`` merges on the right too."""
    keys = [key for key in (func_key, str(order), "DEFAULT", "-1") if key in setting]
    value, source = (setting[keys[0]], keys[0]) if keys else (None, "auto")
    side = next((s for s in map(_side, (setting[k] for k in keys)) if s != "auto"), "auto")
    by_label = [setting[lb] for lb in sorted(labels) if lb in setting]
    if by_label:
        value = max(by_label, key=lambda v: v[0] if isinstance(v, (list, tuple)) else v)
        source = "label"
        label_side = _side(value)
        side = label_side if label_side != "auto" else side
    if value is None:
        return MergeChoice(auto if auto is not None else 1, "auto", source)
    count = value[0] if isinstance(value, (list, tuple)) else value
    return MergeChoice(max(int(count), 1), side, source)


def _side(value) -> str:
    return str(value[1]).lower() if isinstance(value, (list, tuple)) else "auto"


def _key_kinds(setting: dict[str, Any]) -> tuple[dict, dict, dict]:
    """(DEFAULT and func keys, int keys, label keys) of a merge setting."""
    by_func, by_int, by_label = {}, {}, {}
    for key, value in setting.items():
        if key == "DEFAULT" or FUNC_KEY.fullmatch(key):
            by_func[key] = value
        else:
            try:
                int(key)
            except ValueError:
                by_label[key] = value
            else:
                by_int[key] = value
    return by_func, by_int, by_label


def vec_merge_mode(setting: dict[str, Any]) -> str:
    """How vec_nbuffer_setting groups isomorphic tasks, as upstream's NBufferMerge chooses
    (``InitVecNBufferModeBySetting`` in n_buffer_merge.cpp at 883e7dfb): "none" for
    {DEFAULT: 1} or {-1: 1} alone; "topo", every task of the function in task order, for
    DEFAULT or func keys and for the -2 switch; "siblings", only tasks that share their
    first producer or consumer (mergeorder.sibling_groups), with no setting, labels alone
    or int keys."""
    by_func, by_int, by_label = _key_kinds(setting)
    if by_func:
        return "none" if by_func == {"DEFAULT": 1} and not by_int and not by_label \
            else "topo"
    if by_int == {"-1": 1} and not by_label:
        return "none"
    return "topo" if "-2" in by_int else "siblings"


def vec_merge_count(setting: dict[str, Any], order: int, func_key: str, labels: set[str],
                    auto: int) -> MergeChoice:
    """The count vec_nbuffer_setting gives a leaf function, as upstream's ``SetNumDB``:
    with DEFAULT or func keys, the function's func key, else DEFAULT, else the automatic
    count (int keys are then not read); otherwise its hashOrder's int key, else -1's, else
    the automatic count; a label that matches replaces it (the largest if several)."""
    by_func, by_int, by_label = _key_kinds(setting)
    # only one kind of key is read besides labels, so ``choose``'s order over them is
    # upstream's: func key, DEFAULT; or hashOrder, -1
    return choose({**(by_func or by_int), **by_label}, order, func_key, labels, auto)


def merged_index(group_keys: np.ndarray) -> np.ndarray:
    """New task index per old task, keeping first-appearance order."""
    _, first, inverse = np.unique(group_keys, return_index=True, return_inverse=True)
    rank = np.empty(first.size, np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse.ravel()]
