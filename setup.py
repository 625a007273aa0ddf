"""Builds the compiled engine: simcore/machine/engine.py, l2.py and costs.py compiled by
Cython in pure-Python mode, typed by the .pxd files beside them.  The .py files stay the
source and the reference.  A failed build never fails the install: the package then runs
them as Python, and says so in one line when simcore.machine is imported
(tests/test_engine_compiled.py fails under CI=true instead)."""
import compileall
import hashlib
import json
import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

MODULES = ("costs", "l2", "engine")
SOURCES = Path(__file__).resolve().parent / "simcore" / "machine"
# beside the built modules: the sources they were built from (simcore/machine/reference.py
# runs the Python engine when the sources have changed since)
STAMP = "compiled_sources.json"


def digests() -> dict:
    """As simcore/machine/reference.py computes them: per module, sha256 of .py + .pxd."""
    return {m: hashlib.sha256((SOURCES / f"{m}.py").read_bytes()
                              + (SOURCES / f"{m}.pxd").read_bytes()).hexdigest()
            for m in MODULES}


def warn(what: str, exc: BaseException) -> None:
    print(f"warning: {what} failed ({type(exc).__name__}: {exc}); "
          "simcore.machine will run its Python engine", file=sys.stderr)


def ext_modules() -> list:
    if os.environ.get("PTOLAB_NO_COMPILE"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError as exc:
        warn("importing Cython", exc)
        return []
    # no fused multiply-add: the compiled float arithmetic must round as CPython's does
    args = ["-O2", "-ffp-contract=off"]
    mods = [Extension(f"simcore.machine.{m}", [f"simcore/machine/{m}.py"],
                      extra_compile_args=args) for m in MODULES]
    try:
        return cythonize(mods, language_level=3, compiler_directives={
            "boundscheck": False, "wraparound": False, "initializedcheck": False,
            "infer_types": True,
            # the .py annotations document; the .pxd files type
            "annotation_typing": False,
            "binding": False, "embedsignature": False})
    except Exception as exc:        # e.g. engine.py and engine.pxd out of step
        warn("cythonizing the engine", exc)
        return []


class OptionalBuildExt(build_ext):
    """No C compiler, or one that fails: install without the compiled modules."""

    def run(self):
        self.failed = False
        try:
            super().run()
        except Exception as exc:
            warn("building the compiled engine", exc)
            self.failed = True
        if not self.extensions:
            return
        stamp = Path(self.get_ext_fullpath(f"simcore.machine.{MODULES[0]}")).parent / STAMP
        if self.failed:
            stamp.unlink(missing_ok=True)
        else:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(json.dumps(digests(), indent=1) + "\n")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            warn(f"compiling {ext.name}", exc)
            self.failed = True


class BytecodeBuildPy(build_py):
    """An editable install runs ptolab from this tree, and Python caches the bytecode it
    compiles there on first import, unless PYTHONDONTWRITEBYTECODE is set (some CI and
    container images set it).  Then every ptolab process (each Snakemake job, each test's
    subprocess) compiled our ~80 modules from source again, 0.3-0.4 s of its start-up.
    Compiling them once here gives every later process the cached bytecode; an edited
    module is compiled in memory as usual, and its stale cache ignored."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            root = Path(__file__).resolve().parent
            for package in ("simcore", "pipeline"):
                compileall.compile_dir(root / package, quiet=1)


setup(ext_modules=ext_modules(),
      cmdclass={"build_ext": OptionalBuildExt, "build_py": BytecodeBuildPy})
