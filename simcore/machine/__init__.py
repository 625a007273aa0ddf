"""The modeled NPU: run a compiled Program on a Hardware, get a Timeline."""
from .engine import simulate
from .timeline import SchedThread, Timeline

__all__ = ["simulate", "Timeline", "SchedThread"]
