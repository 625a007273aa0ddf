"""The recorder of the kernel being traced (None while a kernel file is only imported)."""
from __future__ import annotations

from . import symbols

active = None


def rec():
    """The active recorder; the stand-in's kernel-side API works only while tracing."""
    if active is None:
        raise RuntimeError("this pypto call works only inside a kernel that `ptolab import` "
                           "is tracing")
    return active


def start(recorder) -> None:
    global active
    active = recorder
    symbols.on_concrete = recorder.on_concrete


def stop() -> None:
    global active
    active = None
    symbols.on_concrete = None
