"""PyPTO's jit options, with upstream's names, defaults and ranges.

Defaults and ranges follow upstream's framework/src/interface/configs/tile_fwk_config.json
and tile_fwk_config_schema.json (hicann/pypto).  A kernel file gives per-kernel defaults; a study stage or
``--set`` overrides single keys.
"""
from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from .base import Strict

# a merge setting's key naming one leaf function: func{magic}_{order}
FUNC_KEY = re.compile(r"func\d+_\d+")


class RuntimeOptions(Strict):
    # max_workspace_kb, device_sched_parallelism, run_mode, valid_shape_optimize and
    # launch_early_mode are accepted so upstream kernels load; the model has no mechanism for
    # them (README "What the model does (and does not)")
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
    # The merge knobs (cube_l1_reuse_setting, cube_nbuffer_setting, vec_nbuffer_setting,
    # sg_set_scope) are validated here and given effect by the compiler (simcore/compiler/
    # build.py, tiling.py).  sg_set_ooo_scope, ooo_sched_mode, auto_mix_partition,
    # sg_set_tunevf_mode and enable_slice, and the graph partitioner's bounds below, are
    # accepted so upstream kernels load; the model has no mechanism for them (README "What
    # the model does (and does not)").  The partitioner's bounds are estimated cycles of a
    # subgraph (upstream's iso_partitioner.cpp), which the compiler does not price: rates
    # are the machine's (simcore/compiler/limits.py).  mg_vec_parallel_lb is no such bound:
    # it sizes the automatic vector merge counts, with no vec_nbuffer_setting or under its
    # -2 switch (simcore/compiler/mergeorder.py); nor is mg_copyin_upper_bound, the bytes
    # a task merged by L1Reuse or CubeNBuffer may copy into L1 (simcore/compiler/build.py),
    # whose default is the guides' commit's (08cec41e4; 100 MiB at 883e7dfb).  Defaults are
    # upstream's (framework/src/interface/configs/tile_fwk_config.json).
    pg_upper_bound: int = Field(10000, ge=0, le=2**31 - 1)
    pg_lower_bound: int = Field(512, ge=0, le=2**31 - 1)
    pg_parallel_lower_bound: int = Field(20, ge=0, le=2**31 - 1)
    pg_skip_partition: bool = False
    mg_copyin_upper_bound: int = Field(2097152, ge=0, le=2**31 - 1)
    mg_vec_parallel_lb: int = Field(48, ge=0, le=2**31 - 1)
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

    @field_validator("cube_l1_reuse_setting")
    @classmethod
    def _l1_reuse(cls, value: dict[str, Any]) -> dict[str, Any]:
        _one_key_kind(value, "cube_l1_reuse_setting")
        for key, v in value.items():
            check_merge_key(key, "cube_l1_reuse_setting", lowest=-1)
            count, side = v if isinstance(v, (list, tuple)) else (v, "auto")
            if isinstance(v, (list, tuple)) and len(v) != 2:
                raise ValueError(f"cube_l1_reuse_setting['{key}'] = {v!r}: a pair must be "
                                 f"(count, side)")
            if type(count) is not int or not 1 <= count < 1_000_000:
                raise ValueError(f"cube_l1_reuse_setting['{key}'] count {count!r} must be an "
                                 f"int in [1, 1000000)")
            if str(side).lower() not in ("auto", "left", "right"):
                raise ValueError(f"cube_l1_reuse_setting['{key}'] side {side!r} must be auto, "
                                 f"left or right")
        return value

    @field_validator("cube_nbuffer_setting", "vec_nbuffer_setting")
    @classmethod
    def _nbuffer(cls, value: dict[str, Any], info) -> dict[str, Any]:
        lowest = -2 if info.field_name == "vec_nbuffer_setting" else -1
        _one_key_kind(value, info.field_name)
        for key, v in value.items():
            check_merge_key(key, info.field_name, lowest=lowest)
            if key == "-2":
                # upstream's multi-input/output merge switch (n_buffer_merge.cpp
                # InitVecNBufferModeBySetting): {-2: 0} alone, or 1 beside other keys
                if v not in (0, 1) or type(v) is not int or (v == 0 and len(value) > 1):
                    raise ValueError(f"{info.field_name}['-2'] = {v!r}: key -2 is the "
                                     f"multi-input/output merge control: use {{-2: 0}} alone "
                                     f"for automatic counts, or -2: 1 beside the counts you "
                                     f"set (upstream refuses anything else)")
                continue
            if type(v) is not int or not 1 <= v <= 2**31 - 1:
                raise ValueError(f"{info.field_name}['{key}'] = {v!r} must be an int >= 1")
        return value

    @field_validator("sg_set_scope", mode="before")
    @classmethod
    def _scope(cls, value):
        return validate_scope(value, "pass.sg_set_scope")


def check_merge_key(key: str, option: str, lowest: int) -> None:
    """Keys: an int hashOrder (lowest.. = defaults), "DEFAULT", func<magic>_<order>, or a label."""
    try:
        number = int(key)
    except ValueError:
        return   # "DEFAULT", func keys and semantic labels are all strings
    if number < lowest:
        raise ValueError(f"{option} key {number} is below {lowest}")


def validate_scope(value: Any, option: str) -> list:
    """sg_set_scope as upstream validates it: int -> [id, False, False], or a triple."""
    if isinstance(value, bool):
        raise ValueError(f"Option '{option}' must be an int or (scope_id, allow_parallel_merge, "
                         f"allow_cross_scope_merge)")
    if isinstance(value, int):
        value = [value, False, False]
    if not isinstance(value, (list, tuple)) or len(value) != 3:
        raise ValueError(f"Option '{option}' must be an int or a list of exactly 3 items "
                         f"(scope_id, allow_parallel_merge, allow_cross_scope_merge)")
    scope_id, parallel, cross = value
    if type(scope_id) is not int:
        raise ValueError(f"Option '{option}[0]' (scope_id) must be an int")
    if type(parallel) is not bool:
        raise ValueError(f"Option '{option}[1]' (allow_parallel_merge) must be a bool")
    if type(cross) is not bool:
        raise ValueError(f"Option '{option}[2]' (allow_cross_scope_merge) must be a bool")
    if not -1 <= scope_id <= 2147483647:
        raise ValueError(f"Option '{option}' scope_id {scope_id} is out of range. "
                         f"Expected -1~2147483647.")
    if scope_id == -1 and (parallel or cross):
        raise ValueError(f"Option '{option}': scope -1 (no scope) requires both flags False")
    return [scope_id, parallel, cross]


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


def _one_key_kind(setting: dict[str, Any], field: str) -> None:
    """Int keys (hashOrders, -1) or DEFAULT / func keys, not both: upstream's set_pass_options
    refuses the mix (``_validate_hash_order_setting``, python/pypto/config.py at 883e7dfb),
    and its pass reads only one kind when both are there."""
    ints = sorted(k for k in setting if k.lstrip("-").isdigit())
    funcs = sorted(k for k in setting if k == "DEFAULT" or FUNC_KEY.fullmatch(k))
    if ints and funcs:
        raise ValueError(f"{field} mixes int keys ({', '.join(ints)}) with DEFAULT / func keys "
                         f"({', '.join(funcs)}); use one kind: -1 for the default with "
                         f"hashOrder ints, or DEFAULT with func{{magic}}_{{order}} keys")
