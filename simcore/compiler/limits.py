"""The hardware facts the compiler reads: they decide the mapping, never its price.

Buffer capacities bound tiles (OoO checks) and depth merge; the AIC core count
bounds the automatic L1Reuse count.  Rates are the machine's business
(simcore/machine/costs.py), so a Program compiled under these limits runs on
any chip that shares them.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..spec.hardware import Buffers, Hardware


@dataclass(frozen=True)
class Limits:
    buffers: Buffers            # on-chip capacities in bytes
    aic_cores: int

    @classmethod
    def of(cls, hw: Hardware) -> "Limits":
        return cls(buffers=hw.buffers, aic_cores=hw.cores.aic)
