"""Core types and the lane names upstream files give to cores.

Numbering: ``CoreType`` in hicann/pypto
framework/src/interface/machine/device/tilefwk/aikernel_data.h.  Blocks are
numbered AIC first, then AIV (0-based in ``tilefwk_L1_prof_data.json`` and PMU
records); lanes that name a core add one to the block (``AIC_1`` is block 0).
"""
from __future__ import annotations

import re
from enum import IntEnum

import numpy as np


class CoreType(IntEnum):
    AIV = 0
    AIC = 1
    MIX = 2
    AICPU = 3
    HUB = 4
    GMATOMIC = 5
    HUB_MIX = 6


AICORE_KINDS = ("AIC", "AIV")
_LANE = re.compile(r"^(AIC|AIV)_(\d+)$")


def type_name(code: int) -> str:
    """The name of a numeric core type; ``INVALID`` for a number upstream does not use."""
    try:
        return CoreType(int(code)).name
    except ValueError:
        return "INVALID"


def kind_of_block(block: int, aic_cores: int) -> str:
    return "AIC" if block < aic_cores else "AIV"


def type_of_blocks(blocks: np.ndarray, aic_cores: int) -> np.ndarray:
    """Numeric core type per block (AIC blocks come first)."""
    return np.where(np.asarray(blocks) < aic_cores, int(CoreType.AIC), int(CoreType.AIV))


def lane_name(kind: str, block: int) -> str:
    """``AIC_<block+1>``: merged_swimlane threads, bubble_analysis.log, msprof processes."""
    return f"{kind}_{block + 1}"


def parse_lane_name(name: str) -> tuple[str, int] | None:
    """(kind, 1-based core index) of an ``AIC_n`` / ``AIV_n`` lane, else None."""
    m = _LANE.match(name)
    return (m.group(1), int(m.group(2))) if m else None


def sched_core_lane(sched_thread: int, kind: str) -> str:
    """``SCHED<k>-AIC``: an AICore lane of machine_trace_perf_data, k the managing thread."""
    return f"SCHED{sched_thread}-{kind}"


def is_sched_core_lane(core_type: str) -> bool:
    return core_type.startswith("SCHED") and any(f"-{k}" in core_type for k in AICORE_KINDS)
