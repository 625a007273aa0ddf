"""Copies of the compiler's plain dataclass records, made in the hot loops.

``dataclasses.replace`` checks every field on each call; a Python ``for`` of thousands of
iterations copies a record per op or per cache hit, where those checks cost more than the
copy.  The records copied here have no ``__post_init__``, so a copy of their ``__dict__``
is the same object ``replace`` would make, and one built field by field what the
constructor would.
"""
from __future__ import annotations


def replaced(obj, **changes):
    """``dataclasses.replace(obj, **changes)`` for a dataclass with no ``__post_init__``."""
    new = object.__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    new.__dict__.update(changes)
    return new


def made(cls, **fields):
    """``cls(**fields)`` for a dataclass with no ``__post_init__`` (frozen or not), every
    field given: no per-field checks or frozen ``object.__setattr__``."""
    new = object.__new__(cls)
    new.__dict__.update(fields)
    return new
