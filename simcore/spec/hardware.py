"""The modeled chip: counts, clocks, buffers, bandwidths and AICPU costs.

A chip is two files: ``<name>.toml`` holds the sourced facts as people write
them (every number with a comment naming its source, docs/sources.md), and an
optional generated ``<name>.fit.toml`` holds the values ``ptolab calibrate``
fitted, with the procedure's provenance in its header.  The loader merges the
overlay over the facts and validates the result as one Hardware; an overlay may
only replace a value the facts file states.  This model only says what a number
means and which values are possible.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from .base import Strict
from .errors import ConfigError
from .loader import read_mapping, validate


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
    """HBM and the shared L2.  ``l2_bytes`` is the nominal capacity; ``l2_usable_fraction``
    of it is what one kernel's working set can keep there (the rest lost to the
    unpublished set mapping and to other occupants): the L2 model's capacity.
    ``l2_replacement`` is which region the model evicts when it is full: the least
    recently used, or one drawn at random (simcore/machine/l2.py)."""
    l2_bytes: PositiveInt
    hbm_gbps: PositiveFloat
    l2_gbps: PositiveFloat
    l2_usable_fraction: float = Field(default=1.0, gt=0, le=1)
    l2_replacement: Literal["lru", "random"] = "lru"

    @property
    def l2_effective_bytes(self) -> float:
        return self.l2_bytes * self.l2_usable_fraction


class PipeRate(Strict):
    """Cycles for one op on one tile: fixed_cycles + bytes / bytes_per_cycle.

    In the vector table a rate is one instruction's: fixed_cycles of start-up, then
    ``repeat_bytes / bytes_per_cycle`` cycles per repeat (``VectorIssue``)."""
    bytes_per_cycle: PositiveFloat
    fixed_cycles: float = Field(ge=0)


class VectorRate(PipeRate):
    """One vector instruction's rate, plus cycles a tile op pays per row of its tile beyond
    the instruction: a tile op that reads each row's value on the scalar unit (a row expand:
    a V->S hand-over, the UB read, an S->V hand-over, then a vector_dup of the row)."""
    row_cycles: float = Field(default=0.0, ge=0)


class Mte2Rate(PipeRate):
    """GM -> UB/L1.  Every contiguous run (burst) costs setup cycles, so short tail
    axes and ND layouts of wide matrices load slower than the same bytes in NZ."""
    burst_setup_cycles: float = Field(ge=0)
    # fixed cycles of one copy-in (one DataCopy) into UB on an AIV / into L1 on an AIC: a
    # task's copy-ins after its first run one after another on its MTE2 pipe, so their
    # setups, like the runs', bound its stream from below (the first hides in the GM round
    # trip)
    aiv_copy_cycles: float = Field(ge=0)
    aic_copy_cycles: float = Field(ge=0)
    # latency of a copy-in served entirely from L2 (fixed_cycles is the HBM round trip)
    l2_hit_fixed_cycles: float = Field(ge=0)
    # GB/s one core can pull from HBM however idle the chip is (GM -> UB on an AIV, GM -> L1
    # on an AIC); the chip's HBM is shared among the cores loading at the moment, each held
    # to its cap.  Unset: the core type's copy rate at the core clock (bytes_per_cycle,
    # or aic_l2_bytes_per_cycle for an AIC when set).
    aiv_hbm_gbps: PositiveFloat | None = None
    aic_hbm_gbps: PositiveFloat | None = None
    # bytes per cycle an AIC's copy-ins stream at from L2 (GM -> L1, with its ND -> NZ
    # reorder); unset: bytes_per_cycle, the GM -> UB copy rate an AIV's copy-ins stream at
    aic_l2_bytes_per_cycle: PositiveFloat | None = None


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


class VectorIssue(Strict):
    """How tile ops become Vector instructions and wait for one another.

    An instruction works on repeats of ``repeat_bytes``; a tile row shorter than that
    still takes a whole repeat, and one instruction issues at most ``max_repeats``.
    Every tile op pays ``issue_cycles`` of scalar issue; an op that reads the result
    of an earlier op of its leaf task waits ``dependency_cycles`` for the pipe to
    drain (pipe_barrier(PIPE_V)), and so does each folding step of a row reduction.
    A tile op that runs a loop of instructions on the scalar unit (a column reduction:
    one instruction per row) pays ``loop_instruction_cycles`` of issue for each.  A
    tensor-tensor ALU instruction (add, sub, mul, div, maximum, minimum) over rows that
    are no whole number of repeats runs in count-mask mode and pays
    ``count_mode_cycles`` once.
    """
    repeat_bytes: PositiveInt
    max_repeats: PositiveInt
    issue_cycles: float = Field(ge=0)
    dependency_cycles: float = Field(ge=0)
    loop_instruction_cycles: float = Field(ge=0)
    count_mode_cycles: float = Field(ge=0)


class ScalarUnit(Strict):
    """The core's scalar unit, for the tile ops that run as scalar loops.

    One element of such a loop is a load from UB, a store to UB and ``loop_alu_ops``
    integer operations (its addresses and the loop test), each at its cycles.
    """
    load_cycles: float = Field(ge=0)
    store_cycles: float = Field(ge=0)
    alu_cycles: float = Field(ge=0)
    loop_alu_ops: float = Field(ge=0)

    @property
    def element_cycles(self) -> float:
        return self.load_cycles + self.store_cycles + self.loop_alu_ops * self.alu_cycles

    @property
    def store_cycles_per_element(self) -> float:
        """One element of a fill loop: its store and the loop's integer operations (the
        value, the address and the test), no load."""
        return self.store_cycles + self.loop_alu_ops * self.alu_cycles


class Pipes(Strict):
    mte2: Mte2Rate        # GM -> UB/L1 (copy in)
    mte1: PipeRate        # L1 -> L0A/L0B
    cube: CubeRate
    fixp: PipeRate        # L0C -> GM
    mte3: PipeRate        # UB -> GM (copy out)
    vector: dict[str, VectorRate]  # per op kind; key "default" for the rest
    vector_issue: VectorIssue
    scalar: ScalarUnit

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
    resolve_edge_us: float = Field(ge=0)       # per successor edge decremented (atomic)
    ready_edge_us: float = Field(ge=0)         # the edge from a successor's last predecessor
    completion_us: float = Field(ge=0)         # noticing one finished leaf task
    ready_handoff_us: float = Field(ge=0)      # a readied task through the shared ready queue
    fairness_us: float = Field(ge=0)           # device_sched_mode 2/3: balancing across threads, per dispatch
    # The chip's time for the per-action costs above (dispatch, the two edges, the
    # completion check, the hand-off) as a fraction of the values given: one factor keeps
    # their ratios, which come from one source (upstream's cost model), and says how fast
    # the chip's AICPU runs them.
    action_scale: float = Field(1.0, gt=0, le=10)
    dev_task_sync_us: float = Field(ge=0)      # hand-over between two dev tasks
    release_per_leaf_task_us: float = Field(ge=0)  # per leaf task, after a dev task ends (docs/sources.md §4)
    exit_us: float = Field(ge=0)
    launch_gap_us: float = Field(ge=0)         # host gap between two launches (rounds)

    def scaled_actions(self) -> "Aicpu":
        """This AICPU with ``action_scale`` applied to the per-action costs (and set to 1)."""
        f = self.action_scale
        return self.model_copy(update={k: getattr(self, k) * f for k in ACTION_COSTS} |
                               {"action_scale": 1.0})


# the per-action costs action_scale scales
ACTION_COSTS = ("dispatch_us", "resolve_edge_us", "ready_edge_us", "completion_us",
                "ready_handoff_us")


class Core(Strict):
    head_overhead_us: float = Field(ge=0)      # per leaf task: launch + pipe sync
    # how much later than a warm one the first leaf task a core runs in a launch starts:
    # the measured spread over the chip's cores at evenly spaced quantiles, from the
    # quickest core to the slowest (empty: no cold start); cold_start_us() lays it out
    first_task_delay_us: list[float] = Field(default_factory=list)

    @field_validator("first_task_delay_us")
    @classmethod
    def _quantiles_rise(cls, v: list[float]) -> list[float]:
        if any(x < 0 for x in v) or any(b < a for a, b in zip(v, v[1:])):
            raise ValueError(f"expected quantiles from the quickest core to the slowest: "
                             f"non-negative and non-decreasing microseconds, got {v}")
        if len(v) == 1:
            raise ValueError("expected at least two quantiles (the quickest and the slowest "
                             "core), or none")
        return v

    def cold_start_us(self, cores: int) -> np.ndarray:
        """Per core, in block order (AIC first, then AIV), its first task's extra delay:
        the quantiles interpolated so block 0 waits least and the last block most."""
        q = self.first_task_delay_us
        if not q or cores == 0:
            return np.zeros(cores)
        at = np.arange(cores) / max(cores - 1, 1)
        return np.interp(at, np.linspace(0.0, 1.0, len(q)), q)


# the tables whose numbers are costs: scaling one moves timings, never the mapping
RACE_TABLES = ("aicpu", "core", "pipes")


class Race(Strict):
    """Variants of the chip that sample the schedule's races.

    Which schedule AICPU ends up owning a chain of dependent tasks is decided by
    sub-percent timing differences, so one run is one draw of a race: a stage whose
    chains outnumber the threads can move by a quarter when any cost moves by half a
    percent.  A racing study (``race: true``) or calibration case runs once per factor,
    with every one of ``paths`` scaled by it: the median is its prediction, the
    smallest and largest run how far the race alone moves it.
    """
    paths: list[str] = Field(min_length=1)
    factors: list[float] = Field(min_length=3)
    why: str = Field(min_length=3)

    @model_validator(mode="after")
    def _factors(self):
        if len(self.factors) % 2 == 0 or 1.0 not in self.factors:
            raise ValueError("race factors must be an odd number of factors that include "
                             "1.0, so the median is one of the runs and the model as "
                             "shipped is among them")
        if any(not 0.5 <= f <= 2.0 for f in self.factors):
            raise ValueError("race factors sample timing noise: keep them within 0.5-2")
        if len(set(self.factors)) != len(self.factors):
            raise ValueError("race factors must differ from one another")
        bad = [p for p in self.paths if p.split(".", 1)[0] not in RACE_TABLES]
        if bad:
            raise ValueError(f"race paths {', '.join(bad)} are not costs: a race scales "
                             f"fields of the {', '.join(RACE_TABLES)} tables")
        return self


class Hardware(Strict):
    name: str
    description: str = ""
    cores: Cores
    buffers: Buffers
    memory: Memory
    pipes: Pipes
    aicpu: Aicpu
    core: Core
    race: Race | None = None

    @property
    def sched_threads(self) -> int:
        return self.aicpu.threads - 1

    @model_validator(mode="after")
    def _race_paths_are_numbers(self):
        for path in self.race.paths if self.race else ():
            try:
                value_at(self, path)
            except ConfigError as exc:
                raise ValueError(f"race: {exc}") from None
        return self


def value_at(hw: Hardware, path: str) -> float:
    """The number at a dotted path of the hardware (``aicpu.dispatch_us``)."""
    node = hw.model_dump()
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"parameter '{path}' is not a field of the hardware file "
                              f"(no '{part}' there); use a dotted path such as "
                              f"aicpu.init_us.")
        node = node[part]
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise ConfigError(f"parameter '{path}' is not a number in the hardware file.")
    return float(node)


def with_values(hw: Hardware, values: dict[str, float]) -> Hardware:
    """A copy of ``hw`` with dotted-path fields replaced (validated again)."""
    data = hw.model_dump()
    for path, value in values.items():
        node = data
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return Hardware.model_validate(data)


def race_median(values) -> tuple[float, float, float]:
    """(median, smallest, largest) of one figure over a race's runs: an odd number of
    factors, so the median is one of the runs."""
    got = sorted(values)
    return got[len(got) // 2], got[0], got[-1]


def race_variants(hw: Hardware) -> list[tuple[float, Hardware]]:
    """(factor, ``hw`` with every race path scaled by it), one per factor of its race
    (factor 1.0 is ``hw`` itself); just ``[(1.0, hw)]`` for a chip without one."""
    if hw.race is None:
        return [(1.0, hw)]
    paths = hw.race.paths
    return [(f, hw if f == 1.0 else with_values(hw, {p: value_at(hw, p) * f for p in paths}))
            for f in hw.race.factors]


HARDWARE_DIR = Path(__file__).resolve().parents[2] / "configs" / "hardware"
FIT_SUFFIX = ".fit.toml"


def fit_overlay(facts: Path) -> Path:
    """Where the fitted values for the facts file ``facts`` live (next to it)."""
    facts = Path(facts)
    return facts.with_name(facts.name[:-len(facts.suffix)] + FIT_SUFFIX)


def dotted_values(table: dict, prefix: str = ""):
    """(dotted path, value) of every non-table value, in the file's order."""
    for key, value in table.items():
        if isinstance(value, dict):
            yield from dotted_values(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def merge_fit(facts: dict, fitted: dict, facts_path: Path, overlay_path: Path) -> dict:
    """``facts`` with every value of ``fitted`` put in its place.

    A fit replaces a value the facts file states; a key the facts file lacks (a typo,
    or a field renamed since the fit) is an error, never a silent addition.
    """
    merged = copy.deepcopy(facts)
    for path, value in dotted_values(fitted):
        node = merged
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or leaf not in node or isinstance(node[leaf], dict):
            raise ConfigError(f"fitted key '{path}' is not a value of the facts file "
                              f"{facts_path}; an overlay may only replace what the facts file "
                              f"states. Remove the key, or rerun ptolab calibrate.",
                              source=str(overlay_path))
        node[leaf] = value
    return merged


def load_hardware(name_or_path: str | Path, search_dir: Path | None = None) -> Hardware:
    """A hardware file by path, or by name from configs/hardware/, with its fit overlay."""
    path = Path(name_or_path)
    if not path.suffix:
        path = (search_dir or HARDWARE_DIR) / f"{name_or_path}.toml"
    if path.name.endswith(FIT_SUFFIX):
        facts = path.with_name(path.name[:-len(FIT_SUFFIX)] + ".toml")
        raise ConfigError(f"this is a fit overlay, not a hardware file; load the facts file "
                          f"{facts} (its overlay is merged over it).", source=str(path))
    data = read_mapping(path)
    overlay = fit_overlay(path)
    if not overlay.exists():
        return validate(Hardware, data, str(path), "hardware")
    data = merge_fit(data, read_mapping(overlay), path, overlay)
    return validate(Hardware, data, f"{path} + {overlay.name}", "hardware")
