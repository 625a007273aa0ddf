"""A stand-in ``torch`` for kernel files when torch is not installed.

Kernel files import torch at module level for their tests; the kernel itself must not need
it.  Every name resolves to a placeholder, so imports, dtype names, decorators and class
bases work; calling torch while a kernel is traced stops with an error.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import types

from . import context


class _Placeholder:
    def __init__(self, path: str):
        self._path = path

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self._path}.{name}")

    def __call__(self, *args, **kwargs):
        if context.active is not None:
            raise context.rec().fail(f"the kernel calls {self._path}, but torch is not "
                                     f"installed (ptolab's stand-in torch only satisfies "
                                     f"imports)", hint="keep torch in the file's test code")
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]      # used as a decorator
        return _Placeholder(f"{self._path}()")

    def __mro_entries__(self, bases):
        return (object,)

    def __repr__(self):
        return f"<stand-in {self._path}>"


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``torch.*`` submodules (``import torch.nn.functional as F``)."""

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in ("torch", "torch_npu"):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


FINDER = _Finder()
