"""Which engine runs: the compiled one (engine.py, l2.py and costs.py built by Cython, see
setup.py) or the same files as plain Python, the reference.

``reference()`` executes the three sources as modules of their own, so one process can run
both engines side by side (tests/test_engine_compiled.py).  ``PTOLAB_ENGINE=python``
makes ``simcore.machine.engine`` the reference for the whole process.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
PACKAGE = __name__.rpartition(".")[0]           # simcore.machine
# compiled from their .py sources by setup.py, in dependency order
MODULES = ("costs", "l2", "engine")
_reference: ModuleType | None = None


def is_compiled(module: ModuleType) -> bool:
    return not str(getattr(module, "__file__", "")).endswith(".py")


def reference() -> ModuleType:
    """engine.py as Python, with the l2.py and costs.py it imports as Python too (as
    ``simcore.machine.<name>_py``); loaded once."""
    global _reference
    if _reference is None:
        loaded: dict[str, ModuleType] = {}
        saved = {m: sys.modules.get(f"{PACKAGE}.{m}") for m in MODULES}
        try:
            for name in MODULES:
                spec = importlib.util.spec_from_file_location(
                    f"{PACKAGE}.{name}_py", HERE / f"{name}.py")
                module = importlib.util.module_from_spec(spec)
                module.__package__ = PACKAGE
                sys.modules[spec.name] = module
                # the relative imports in the next source (from .l2, from .costs) find
                # these Python modules rather than the compiled ones
                for done, mod in loaded.items():
                    sys.modules[f"{PACKAGE}.{done}"] = mod
                spec.loader.exec_module(module)
                loaded[name] = module
        finally:
            for m, mod in saved.items():
                if mod is None:
                    sys.modules.pop(f"{PACKAGE}.{m}", None)
                else:
                    sys.modules[f"{PACKAGE}.{m}"] = mod
        _reference = loaded["engine"]
    return _reference


def digests() -> dict[str, str]:
    """Per compiled module, sha256 of its .py and .pxd (as setup.py stamps them)."""
    return {m: hashlib.sha256((HERE / f"{m}.py").read_bytes()
                              + (HERE / f"{m}.pxd").read_bytes()).hexdigest()
            for m in MODULES}


def compiled_state() -> str:
    """"built": compiled modules built from the sources as they are; "stale": the sources
    changed since (an edit or a merge not yet rebuilt); "missing": nothing compiled."""
    built = [m for m in MODULES if any((HERE / f"{m}{suffix}").exists()
                                       for suffix in importlib.machinery.EXTENSION_SUFFIXES)]
    if not built:
        return "missing"
    if len(built) < len(MODULES):
        return "stale"
    try:
        stamp = json.loads((HERE / "compiled_sources.json").read_text())
    except (OSError, ValueError):
        return "stale"
    try:
        current = digests()
    except OSError:         # an install without the sources: nothing to be older than
        return "built"
    return "built" if stamp == current else "stale"


def _use_reference() -> None:
    """The Python sources become simcore.machine.engine, .l2 and .costs."""
    reference()
    for m in MODULES:
        sys.modules[f"{PACKAGE}.{m}"] = sys.modules[f"{PACKAGE}.{m}_py"]


def select() -> None:
    """Called as simcore.machine is imported: honour PTOLAB_ENGINE=python, and run the
    Python engine, saying so in one line, when the compiled one is missing or was built
    from other sources (a compiled module never runs code older than its .py)."""
    if os.environ.get("PTOLAB_ENGINE", "").strip().lower() == "python":
        _use_reference()
        return
    state = compiled_state()
    if state == "built":
        return
    _use_reference()
    why = ("is not built" if state == "missing" else
           "was built from older sources of simcore/machine/{engine,l2,costs}")
    print(f"ptolab: the compiled engine {why} (pip install -e . builds it); running the "
          f"Python engine, about 10x slower", file=sys.stderr)
