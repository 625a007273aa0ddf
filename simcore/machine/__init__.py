"""The modeled NPU: run a compiled Program on a Hardware, get a Timeline.

``Machine(hw, program, options)`` prepares the program once; each ``run()``
simulates one launch from scratch.  ``simulate`` does both.  The engine is compiled
when built (setup.py); ``PTOLAB_ENGINE=python`` runs its Python source instead
(simcore/machine/reference.py).
"""
from .reference import select as _select

_select()

from .engine import Machine, simulate  # noqa: E402
from .timeline import SchedThread, Timeline  # noqa: E402

__all__ = ["Machine", "simulate", "Timeline", "SchedThread"]
