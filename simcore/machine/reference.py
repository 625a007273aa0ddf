"""Which engine runs: the compiled one (engine.py, l2.py and costs.py built by Cython, see
setup.py) or the same files as plain Python, the reference.

``reference()`` executes the three sources as modules of their own, so one process can run
both engines side by side (tests/test_engine_compiled.py).  ``PTOLAB_ENGINE=python``
makes ``simcore.machine.engine`` the reference for the whole process.
"""
from __future__ import annotations

import importlib.util
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


def select() -> None:
    """Called as simcore.machine is imported: honour PTOLAB_ENGINE, and say so in one line
    when the compiled engine is missing (the build failed or was skipped)."""
    choice = os.environ.get("PTOLAB_ENGINE", "").strip().lower()
    if choice == "python":
        sys.modules[f"{PACKAGE}.engine"] = reference()
        return
    from . import engine
    if not is_compiled(engine) and choice != "python":
        print("ptolab: the compiled engine is not built (pip install -e . builds it); "
              "running the Python engine, several times slower", file=sys.stderr)
