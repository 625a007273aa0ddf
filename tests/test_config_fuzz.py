"""Fuzzing the config loaders: whatever a file or an override holds, the answer is a model or
one ConfigError, never another exception (which the CLI would show as a traceback)."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from conftest import REPO  # noqa: E402
from pipeline.calibrate import Calibration  # noqa: E402
from pipeline.nightly.config import NightlyConfig  # noqa: E402
from simcore.compiler.estimate import check_size  # noqa: E402
from simcore.spec.errors import ConfigError  # noqa: E402
from simcore.spec.hardware import Hardware  # noqa: E402
from simcore.spec.kernel import Kernel  # noqa: E402
from simcore.spec.loader import read_mapping, validate  # noqa: E402
from simcore.spec.overrides import apply, parse_assignment  # noqa: E402
from simcore.spec.study import Study, Workflow  # noqa: E402

CONFIGS = REPO / "configs"
BASES = {
    "kernel": (Kernel, [read_mapping(CONFIGS / "kernels" / f"{n}.yaml")
                        for n in ("multi_stitch_add", "glm_attention", "rmsnorm",
                                  "skinny_matmul")]),
    "study": (Study, [read_mapping(CONFIGS / "studies" / "glm_attention_tuning.yaml")]),
    "workflow": (Workflow, [read_mapping(CONFIGS / "workflow.yaml")]),
    "hardware": (Hardware, [read_mapping(CONFIGS / "hardware" / "dav_2201.toml")]),
    "nightly": (NightlyConfig, [read_mapping(CONFIGS / "nightly.yaml")]),
    "calibration": (Calibration, [read_mapping(CONFIGS / "calibration" / "dav_2201.yaml")]),
}
def fast(examples: int) -> settings:
    """Deterministic (same examples every run, nothing stored) and without a deadline."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-3, 3),
    st.sampled_from([0, 1, -1, 2**31, 2**63, 10**12]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
    st.sampled_from(["N", "N*W", "i*W", "1//0", "x +", "min(N)", "__import__", "fp16", "-1"]))
values = st.one_of(scalars, st.lists(scalars, max_size=3),
                   st.dictionaries(st.text(max_size=4), scalars, max_size=2))


def paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a nested config where a value sits."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, child in node.items():
            found += paths(child, prefix + (key,))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            found += paths(child, prefix + (i,))
    return found


def mutate(base: dict, path: tuple, value: Any, action: str) -> dict:
    """A copy of ``base`` changed at ``path``; only the containers on the path are copied."""
    data = dict(base)
    node = data
    for part in path[:-1]:
        child = node[part]
        node[part] = child = dict(child) if isinstance(child, dict) else list(child)
        node = child
    last = path[-1]
    if action == "delete":
        del node[last]
    elif action == "rename" and isinstance(node, dict):
        node[f"{last}_x"] = node.pop(last)
    else:
        node[last] = value
    return data


_PATHS = {id(base): paths(base) for _, bases in BASES.values() for base in bases}


def expect_model_or_config_error(model, data: dict, what: str):
    try:
        result = validate(model, data, "fuzz.yaml", what)
    except ConfigError as exc:
        assert "fuzz.yaml" in str(exc)
        return None
    return result


@st.composite
def mutated(draw, kind: str):
    model, bases = BASES[kind]
    data = draw(st.sampled_from(bases))
    for step in range(draw(st.integers(1, 2))):
        where = _PATHS[id(data)] if step == 0 else paths(data)
        if not where:
            break
        path = where[draw(st.integers(0, len(where) - 1))]
        data = mutate(data, path, draw(values), draw(st.sampled_from(["set", "delete",
                                                                      "rename"])))
    return model, data


@fast(1200)
@given(mutated("kernel"))
def test_mutated_kernels_validate_or_say_why(case):
    model, data = case
    kernel = expect_model_or_config_error(model, data, "kernel")
    if kernel is not None:
        try:
            check_size(kernel, env={})
        except ConfigError:
            pass


@fast(150)
@given(st.sampled_from(["study", "workflow", "hardware", "nightly", "calibration"])
       .flatmap(mutated))
def test_mutated_configs_validate_or_say_why(case):
    model, data = case
    expect_model_or_config_error(model, data, "config")


_SCRATCH = Path(tempfile.mkdtemp(prefix="ptolab-fuzz-"))


@fast(400)
@given(st.sampled_from([".yaml", ".toml"]),
       st.one_of(st.binary(max_size=64), st.text(max_size=64).map(str.encode),
                 st.sampled_from([b"a: [", b"a = ", b"- 1", b"!!python/object:os.system {}",
                                  b"a: &x [*x]", b"\xff\xfe", b"[[body]]\nop=1",
                                  b"a: 2001-01-01", b"? [1]\n: 2", b"a: .inf"])))
def test_any_file_content_reads_or_says_why(suffix, content):
    path = _SCRATCH / f"k{suffix}"
    path.write_bytes(content)
    try:
        data = read_mapping(path)
    except ConfigError as exc:
        assert str(path) in str(exc)
        return
    assert isinstance(data, dict)
    expect_model_or_config_error(Kernel, data, "kernel")


KEYS = st.one_of(
    st.sampled_from(["params.N", "params.W", "params.n", "tiles.vec", "tiles.cube",
                     "runtime_options.stitch_function_max_num", "runtime_options.nope",
                     "pass_options.sg_set_scope", "pass_options.cube_l1_reuse_setting",
                     "debug_options.runtime_debug_mode", "codegen_options.enable_pmu_trace",
                     "options.x", "params", "", "tiles.vec.0"]),
    st.text(max_size=12))
RAW = st.one_of(st.sampled_from(["1", "1e3", "\"128\"", "true", "null", "[16]", "[0]", "[-4]",
                                 "{\"DEFAULT\": 4}", "Infinity", "NaN", "[1, true, false]",
                                 "{", "HLF", "-1", "99999999999999999999"]),
                st.text(max_size=10))
MSA = read_mapping(CONFIGS / "kernels" / "multi_stitch_add.yaml")


@fast(500)
@given(st.lists(st.tuples(KEYS, RAW), min_size=1, max_size=3))
def test_any_override_applies_or_says_why(pairs):
    try:
        overrides = dict(parse_assignment(f"{key}={raw}") for key, raw in pairs)
        kernel = validate(Kernel, apply(MSA, overrides), "fuzz.yaml", "kernel")
        check_size(kernel, env={})
    except ConfigError:
        pass
