"""PyPTO's jit options, with upstream's names, defaults and ranges.

Defaults and ranges follow reference/upstream-formats.md §12 (tile_fwk_config.json
and its schema).  A kernel file gives per-kernel defaults; a study stage or
``--set`` overrides single keys.
"""
from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from .base import Strict


class RuntimeOptions(Strict):
    stitch_function_max_num: int = Field(128, ge=1, le=1024)
    device_sched_mode: int = Field(0, ge=0, le=3)
    max_workspace_kb: int = Field(0, ge=0, le=2**31 - 1)
    device_sched_parallelism: int = Field(1, ge=1, le=8)
    launch_sched_aicpu_num: int = Field(7, ge=1, le=7)
    run_mode: int = Field(0, ge=0, le=1)
    valid_shape_optimize: int = Field(0, ge=0, le=1)
    launch_early_mode: int = Field(0, ge=0, le=2)
    ready_on_host_tensors: list[str] = Field(default_factory=list)


class PassOptions(Strict):
    # Merge knobs: accepted and validated here; the compiler issue gives them effect.
    cube_l1_reuse_setting: dict[str, Any] = Field(default_factory=dict)
    cube_nbuffer_setting: dict[str, Any] = Field(default_factory=lambda: {"-1": 1})
    vec_nbuffer_setting: dict[str, Any] = Field(default_factory=dict)
    sg_set_scope: int | list[Any] = Field(default_factory=lambda: [-1, False, False])
    sg_set_ooo_scope: list[int] = Field(default_factory=lambda: [-1])
    ooo_sched_mode: str = ""
    auto_mix_partition: int = 0
    sg_set_tunevf_mode: int = Field(0, ge=0, le=2)
    enable_slice: bool = False

    @field_validator("cube_l1_reuse_setting", "cube_nbuffer_setting", "vec_nbuffer_setting",
                     mode="before")
    @classmethod
    def _keys_as_text(cls, value: Any) -> Any:
        # TOML and JSON keys are strings already; YAML may give ints (-1: 4).
        if isinstance(value, dict):
            return {str(k): v for k, v in value.items()}
        return value


class DebugOptions(Strict):
    runtime_debug_mode: int = Field(0, ge=0, le=4)
    compile_debug_mode: int = Field(0, ge=0, le=2)


class CodegenOptions(Strict):
    enable_pmu_trace: bool = False


class JitOptions(Strict):
    runtime_options: RuntimeOptions = Field(default_factory=RuntimeOptions)
    pass_options: PassOptions = Field(default_factory=PassOptions)
    debug_options: DebugOptions = Field(default_factory=DebugOptions)
    codegen_options: CodegenOptions = Field(default_factory=CodegenOptions)
