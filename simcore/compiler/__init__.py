"""Kernel -> tile ops -> leaf functions -> root calls -> dev tasks."""
from .build import compile_kernel, stable_hash
from .program import CoreType, LeafFunction, Program, RootFunction

__all__ = ["compile_kernel", "stable_hash", "Program", "LeafFunction", "RootFunction",
           "CoreType"]
