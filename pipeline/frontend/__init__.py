"""Bring your own kernel: trace a PyPTO Python kernel into a kernel config.

``ptolab import FILE.py[:FUNCTION]`` imports the file with a tracing stand-in for the
``pypto`` module (standin.py), calls the kernel with placeholder tensors built from its
``pypto.Tensor`` annotations, and writes what it did as a kernel config (emit.py).  The
stand-in never shadows a real PyPTO: if ``pypto`` is importable for real, the import is
refused (loader.py).  When torch is not installed, a stand-in torch lets the file's
module-level ``import torch`` work.
"""
from .emit import kernel_text
from .loader import Traced, parse_values, trace_file

__all__ = ["kernel_text", "parse_values", "trace_file", "Traced"]
