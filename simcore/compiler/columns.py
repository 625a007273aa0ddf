"""Index columns of many parts joined at once.

A root call of a Python ``for`` gives thousands of small parts (a group's leaf tasks, their
work rows and GM accesses); shifting each part's task numbers and renumbering its keys
part by part costs a numpy call per part, where one call over the joined column does.
"""
from __future__ import annotations

import numpy as np


def shifted(columns: list[np.ndarray], offsets) -> np.ndarray:
    """The columns joined, each part's values plus its offset."""
    sizes = [c.size for c in columns]
    return np.concatenate(columns) + np.repeat(np.asarray(offsets, np.int64), sizes)


def mapped(columns: list[np.ndarray], maps: list[np.ndarray]) -> np.ndarray:
    """The columns joined, each part's values looked up in its own map."""
    sizes = [c.size for c in columns]
    base = np.cumsum([0] + [m.size for m in maps[:-1]])
    index = np.concatenate(columns).astype(np.int64, copy=False)
    return np.concatenate(maps)[index + np.repeat(base, sizes)]
