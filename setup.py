"""Builds the compiled engine: simcore/machine/engine.py and l2.py compiled by Cython in
pure-Python mode, typed by the .pxd files beside them.  The .py files stay the source and
the reference; if this build fails, simcore.machine falls back to them with a warning."""
import os

from setuptools import setup

try:
    from Cython.Build import cythonize
except ImportError:             # no Cython: the package installs, the engine runs as Python
    cythonize = None


def ext_modules():
    if cythonize is None or os.environ.get("PTOLAB_NO_COMPILE"):
        return []
    from setuptools import Extension
    # no fused multiply-add: the compiled float arithmetic must round as CPython's does
    args = ["-O2", "-ffp-contract=off"]
    mods = [Extension(f"simcore.machine.{m}", [f"simcore/machine/{m}.py"],
                      extra_compile_args=args) for m in ("costs", "l2", "engine")]
    return cythonize(mods, language_level=3, compiler_directives={
        "boundscheck": False, "wraparound": False, "initializedcheck": False,
        "infer_types": True,
        # the .py annotations document; the .pxd files type
        "annotation_typing": False,
        "binding": False, "embedsignature": False})


setup(ext_modules=ext_modules())
