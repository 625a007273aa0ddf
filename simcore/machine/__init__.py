"""The modeled NPU: run a compiled Program on a Hardware, get a Timeline.

``Machine(hw, program, options)`` prepares the program once; each ``run()``
simulates one launch from scratch.  ``simulate`` does both.
"""
from .engine import Machine, simulate
from .timeline import SchedThread, Timeline

__all__ = ["Machine", "simulate", "Timeline", "SchedThread"]
