"""``--set KEY=VALUE`` overrides with PyPTO's option names, applied before validation.

Keys: ``runtime_options.*``, ``pass_options.*``, ``debug_options.*``,
``codegen_options.*`` (jit options), ``params.<name>`` (shape parameters),
``tiles.<name>`` (tile shapes), ``values.<name>`` (the data of a tensor the kernel reads
as scalars) and ``tensors.<name>.format`` / ``tensors.<name>.cache_policy`` (how a declared
tensor is stored: the performance guide's NZ weights and ``set_cache_policy``).  Values are
JSON; a bare word that is not JSON is taken as a string, so
``--set pass_options.ooo_sched_mode=HLF`` and ``--set tensors.w.format=NZ`` work.
"""
from __future__ import annotations

import copy
import json
from typing import Any, Iterable

from .errors import ConfigError
from .options import JitOptions

OPTION_GROUPS = ("runtime_options", "pass_options", "debug_options", "codegen_options")
TOP_GROUPS = ("params", "tiles", "values")
# what of a declared tensor a study may change: its storage, not its shape or role
TENSOR_FIELDS = ("format", "cache_policy")


def parse_assignment(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set '{text}' is not KEY=VALUE; for example "
                          f"--set runtime_options.stitch_function_max_num=64.")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        if raw.strip()[:1] in ("[", "{", '"'):
            # meant as JSON (a list, a table, a quoted string): say where it breaks
            raise ConfigError(f"--set '{key}': value {raw!r} is not valid JSON ({exc.msg} at "
                              f"character {exc.pos + 1}); write a list as [16, 64], a table "
                              f"as {{\"m\": [16, 16]}}.") from None
        value = raw
    return key, value


def parse_assignments(texts: Iterable[str]) -> dict[str, Any]:
    return dict(parse_assignment(t) for t in texts)


def apply(kernel_data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of a kernel's raw data with the overrides written in.

    Every key must name something that exists: an option PyPTO has, or a param or
    tile the kernel declares.  A typo would otherwise add a knob nothing reads.
    """
    data = copy.deepcopy(kernel_data)
    for key, value in overrides.items():
        group, _, rest = key.partition(".")
        if group == "tensors":
            _set_tensor_field(data, key, rest, value)
            continue
        if not rest and group in OPTION_GROUPS + TOP_GROUPS and isinstance(value, dict):
            example = next(iter(value), "<name>")
            raise ConfigError(
                f"override key '{key}' names a whole group; set its entries one by one with "
                f"dotted keys, e.g. '{key}.{example}: ...' (an override replaces one value, "
                f"so a nested table would be ambiguous).")
        if not rest or group not in OPTION_GROUPS + TOP_GROUPS:
            raise ConfigError(
                f"override key '{key}' is not known; expected <group>.<name> with group one "
                f"of {', '.join(OPTION_GROUPS + TOP_GROUPS)}, or tensors.<name>.format / "
                f".cache_policy (for example "
                f"runtime_options.stitch_function_max_num).")
        target = data.setdefault("options", {}) if group in OPTION_GROUPS else data
        node = target.setdefault(group, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override '{key}': '{group}' in the kernel file is not a table.")
        known = _known_names(group, node)
        if rest not in known:
            raise ConfigError(
                f"override '{key}' names {_WHAT[group]} '{rest}', which "
                f"{'the kernel does not declare' if group in TOP_GROUPS else 'PyPTO does not have'}"
                f"; known: {', '.join(sorted(known)) or 'none'}. Check the spelling (names "
                f"are case-sensitive).")
        node[rest] = value
    return data


def _set_tensor_field(data: dict, key: str, rest: str, value: Any) -> None:
    name, _, field = rest.rpartition(".")
    tensors = data.get("tensors")
    if not isinstance(tensors, dict) or name not in tensors:
        known = ", ".join(sorted(tensors)) if isinstance(tensors, dict) else "none"
        raise ConfigError(f"override '{key}' names tensor '{name}', which the kernel does not "
                          f"declare; known: {known}. Use tensors.<name>.<field>.")
    if field not in TENSOR_FIELDS:
        raise ConfigError(f"override '{key}': a study may change a tensor's "
                          f"{' or '.join(TENSOR_FIELDS)}, not '{field}'.")
    if not isinstance(tensors[name], dict):
        raise ConfigError(f"override '{key}': tensor '{name}' in the kernel file is not a table.")
    tensors[name][field] = value


_WHAT = {"params": "param", "tiles": "tile shape", "values": "tensor values", **{g: f"{g} option" for g in OPTION_GROUPS}}


def _known_names(group: str, node: dict) -> list[str]:
    if group in TOP_GROUPS:
        return [str(k) for k in node]
    return list(JitOptions.model_fields[group].annotation.model_fields)
