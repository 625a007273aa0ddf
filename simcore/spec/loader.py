"""Read TOML or YAML config files and validate them into typed models.

One reader for every config kind: the file's suffix picks the parser, pydantic
does the checking, and every failure becomes a :class:`ConfigError` that names
the file, the field path, the bad value and what was expected.
"""
from __future__ import annotations

import functools

import tomllib
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .errors import ConfigError

M = TypeVar("M", bound=BaseModel)

SUFFIXES = {".toml": "TOML", ".yaml": "YAML", ".yml": "YAML"}
# libyaml's parser, where PyYAML was built with it, reads a config several times faster (the
# workflow reads every study and kernel at each start); it builds the same values
_FAST_LOADER = getattr(yaml, "CSafeLoader", None)


def _yaml(text: str):
    if _FAST_LOADER is not None:
        try:
            return yaml.load(text, Loader=_FAST_LOADER)
        except yaml.YAMLError:
            pass    # the pure parser names the problem and its place more plainly
    return yaml.safe_load(text)


def read_mapping(path: Path) -> dict[str, Any]:
    """Parse a TOML or YAML file into a dict; syntax errors name the line."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError("is a folder; pass a .toml or .yaml config file.", source=str(path))
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ConfigError(
            f"unsupported config file type '{path.suffix}'; expected one of "
            f"{', '.join(sorted(SUFFIXES))}.", source=str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the file ({exc.strerror}).", source=str(path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"is not a text file: byte {exc.start} ({exc.object[exc.start]:#04x}) "
                          f"is not UTF-8. Pass the {kind} config file itself, not a binary "
                          f"or compiled file.", source=str(path)) from None
    try:
        data = tomllib.loads(text) if kind == "TOML" else _yaml(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"broken TOML syntax: {exc}. Fix the syntax and rerun.",
                          source=str(path)) from None
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"broken YAML syntax{at}: {problem}. Fix the syntax and rerun.",
                          source=str(path)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"the top level must be a table/mapping, got {type(data).__name__}.",
                          source=str(path))
    return data


def field_path(loc: tuple) -> str:
    """('body', 0, 'loop', 'trip') -> 'body[0].loop.trip'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith(("function-", "tagged-union")) or \
                str(part).endswith(" statement") or _union_member(part):
            continue  # union tags say nothing to a user
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _union_member(part) -> bool:
    """A loc part naming which form of a union pydantic tried ('list[union[int,str]]', a
    config model's class name), not a field: no field or key of ours looks like that."""
    text = str(part)
    return "[" in text or text in _model_names()


@functools.lru_cache(maxsize=1)
def _model_names() -> frozenset[str]:
    from .base import Strict
    seen, todo = set(), [Strict]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__name__ not in seen:
                seen.add(sub.__name__)
                todo.append(sub)
    return frozenset(seen)


def explain(exc: ValidationError, source: str, what: str) -> ConfigError:
    """Turn pydantic's report into one readable paragraph: one sentence per field, the
    forms a union field allows joined by 'or'."""
    parts: dict[tuple, list[str]] = {}
    for err in exc.errors(include_url=False):
        path = field_path(err["loc"])
        kind = err["type"]
        if kind == "extra_forbidden":
            head, msg = f"field '{path}' is not a known {what} field (remove it or check its " \
                        f"spelling)", ""
        elif kind == "missing":
            head, msg = f"field '{path}' is required but missing", ""
        else:
            shown = repr(err.get("input"))
            if len(shown) > 60:
                shown = shown[:57] + "..."
            head, msg = f"field '{path}' has value {shown}", err["msg"]
        msgs = parts.setdefault((head,), [])
        if msg and msg not in msgs:
            msgs.append(msg)
    text = "; ".join(head + (": " + ", or ".join(msgs) if msgs else "")
                     for (head,), msgs in parts.items())
    return ConfigError("invalid " + what + ": " + text + ".", source=source)


def validate(model: type[M], data: dict[str, Any], source: str, what: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise explain(exc, source, what) from None


def load(model: type[M], path: Path, what: str) -> M:
    return validate(model, read_mapping(path), str(path), what)
