"""Kernel -> tile ops -> leaf functions -> root calls -> dev tasks.

The names below load their modules on first use, so a reader of one light module (the
report's merge-key rules in merge.py) does not import the whole compiler."""
from __future__ import annotations

import importlib

_HOME = {"compile_kernel": "build", "stable_hash": "build", "Program": "program",
         "LeafFunction": "program", "RootFunction": "program", "CoreType": "program"}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
