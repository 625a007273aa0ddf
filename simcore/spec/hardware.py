"""The modeled chip: counts, clocks, buffers, bandwidths and AICPU costs.

Every number in a hardware file carries a comment naming its source; a fitted
number names the procedure that fitted it.  This model only says what a number
means and which values are possible.
"""
from __future__ import annotations

from pathlib import Path

from pydantic import Field, PositiveFloat, PositiveInt, field_validator

from .base import Strict
from .loader import load


class Cores(Strict):
    aic: PositiveInt
    aiv: PositiveInt
    clock_mhz: PositiveFloat


class Buffers(Strict):
    """On-chip buffer capacities in bytes."""
    ub: PositiveInt
    l1: PositiveInt
    l0a: PositiveInt
    l0b: PositiveInt
    l0c: PositiveInt


class Memory(Strict):
    l2_bytes: PositiveInt
    hbm_gbps: PositiveFloat
    l2_gbps: PositiveFloat


class PipeRate(Strict):
    """Cycles for one op on one tile: fixed_cycles + bytes / bytes_per_cycle."""
    bytes_per_cycle: PositiveFloat
    fixed_cycles: float = Field(ge=0)


class Mte2Rate(PipeRate):
    """GM -> UB/L1.  Every contiguous run (burst) costs setup cycles, so short tail
    axes and ND layouts of wide matrices load slower than the same bytes in NZ."""
    burst_setup_cycles: float = Field(ge=0)
    # latency of a copy-in served entirely from L2 (fixed_cycles is the HBM round trip)
    l2_hit_fixed_cycles: float = Field(ge=0)


class CubeRate(Strict):
    """Cycles per 16x16x16 fractal by input dtype ("default" for the rest)."""
    fixed_cycles: float = Field(ge=0)
    cycles_per_fractal: dict[str, PositiveFloat]

    @field_validator("cycles_per_fractal")
    @classmethod
    def _has_default(cls, table):
        if "default" not in table:
            raise ValueError("cycles_per_fractal needs a 'default' entry")
        return table


class Pipes(Strict):
    mte2: Mte2Rate        # GM -> UB/L1 (copy in)
    mte1: PipeRate        # L1 -> L0A/L0B
    cube: CubeRate
    fixp: PipeRate        # L0C -> GM
    mte3: PipeRate        # UB -> GM (copy out)
    vector: dict[str, PipeRate]  # per op kind; key "default" for the rest

    @field_validator("vector")
    @classmethod
    def _has_default(cls, table: dict[str, PipeRate]) -> dict[str, PipeRate]:
        if "default" not in table:
            raise ValueError("the vector table needs a 'default' entry for op kinds it "
                             "does not list")
        return table


class Aicpu(Strict):
    """AICPU threads and the cost of each runtime action, in microseconds."""
    threads: int = Field(ge=2, le=6)           # 1 control + (threads-1) schedule
    profile_freq_mhz: PositiveFloat            # device counter tick rate in profiling files
    init_us: float = Field(ge=0)               # ctrl/sched start-up up to the core handshake
    # the control thread fetching the values its control flow reads (kernel tensors marked
    # control_flow_input) before it can build; skipped when they are ready on the host
    host_value_fetch_us: float = Field(ge=0)
    handshake_us: float = Field(ge=0)
    build_dev_task_us: float = Field(ge=0)     # fixed part of building one dev task
    build_per_root_call_us: float = Field(ge=0)
    build_per_leaf_task_us: float = Field(ge=0)
    dispatch_us: float = Field(ge=0)           # per leaf task sent to a core
    resolve_edge_us: float = Field(ge=0)       # per successor edge decremented
    completion_us: float = Field(ge=0)         # noticing one finished leaf task
    ready_handoff_us: float = Field(ge=0)      # a readied task through the shared ready queue
    fairness_us: float = Field(ge=0)           # device_sched_mode 2/3: balancing across threads, per dispatch
    dev_task_sync_us: float = Field(ge=0)      # hand-over between two dev tasks
    release_per_leaf_task_us: float = Field(ge=0)  # control thread retires a finished dev task
    exit_us: float = Field(ge=0)
    launch_gap_us: float = Field(ge=0)         # host gap between two launches (rounds)


class Core(Strict):
    head_overhead_us: float = Field(ge=0)      # per leaf task: launch + pipe sync


class Hardware(Strict):
    name: str
    description: str = ""
    cores: Cores
    buffers: Buffers
    memory: Memory
    pipes: Pipes
    aicpu: Aicpu
    core: Core

    @property
    def sched_threads(self) -> int:
        return self.aicpu.threads - 1


HARDWARE_DIR = Path(__file__).resolve().parents[2] / "configs" / "hardware"


def load_hardware(name_or_path: str | Path, search_dir: Path | None = None) -> Hardware:
    """A hardware file by path, or by name from configs/hardware/."""
    path = Path(name_or_path)
    if not path.suffix:
        path = (search_dir or HARDWARE_DIR) / f"{name_or_path}.toml"
    return load(Hardware, path, "hardware")
