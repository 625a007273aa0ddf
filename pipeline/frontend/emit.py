"""A traced kernel -> kernel config text (the schema of configs/kernels/*.yaml).

The config opens with a header naming the source file and its SHA-256; every op carries
the source line that made it as its ``src`` field (the compiler hands it on to the
program's ops, and the report links it), the other statements as a comment.  The text is validated
against the kernel schema before anyone writes it.
"""
from __future__ import annotations

import yaml

from simcore.spec.kernel import Kernel
from simcore.spec.loader import validate

from .loader import Traced
from .recorder import LoopRec, OpRec, StateRec

_FIELD_ORDER = ("op", "inputs", "out", "scalar", "dtype", "shape", "offsets", "valid_shape", "axis",
                "keepdim", "a_trans", "b_trans", "transposed_batch", "perm", "inplace", "value",
                "start", "step", "k", "largest", "part", "block_size", "label", "cond", "src")


def _flow(value) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip()
    return text[:-3].strip() if text.endswith("\n...") else text


class _Tiles:
    """Tile shapes go into ``tiles`` under names a study can override (tiles.vec=...)."""

    def __init__(self):
        self.table: dict[str, object] = {}

    def name(self, kind: str, value) -> str:
        plain = list(value) if kind == "vec" else {k: list(v) if isinstance(v, (list, tuple))
                                                   else v for k, v in value.items()}
        for name, known in self.table.items():
            if known == plain and name.startswith(kind):
                return name
        count = sum(n.startswith(kind) for n in self.table)
        name = kind if not count else f"{kind}{count + 1}"
        self.table[name] = plain
        return name


def _cond_text(conds: tuple) -> str | None:
    if not conds:
        return None
    if len(conds) == 1:
        return conds[0]
    return " and ".join(f"({c})" for c in conds)


def _at(where: str) -> str:
    """A statement's source line, by file name (the header names the full path)."""
    return where.replace("\\", "/").rsplit("/", 1)[-1]


def _op_dict(rec: OpRec, name_of) -> dict:
    fields = dict(rec.fields)
    fields["inputs"] = [name_of(v.slot) for v in rec.inputs]
    fields["out"] = name_of(rec.out) if not hasattr(rec.out, "slot") else name_of(rec.out.slot)
    cond = _cond_text(rec.cond)
    if cond:
        fields["cond"] = cond
    if fields["op"] == "full":
        fields.pop("inputs")
    fields["src"] = _at(rec.where)      # data the compiler carries to the program's ops
    unknown = set(fields) - set(_FIELD_ORDER)
    if unknown:     # a field the config would lose
        raise ValueError(f"op field(s) {sorted(unknown)} have no place in _FIELD_ORDER")
    return {k: fields[k] for k in _FIELD_ORDER if k in fields}


# a condition longer than this that several ops carry (every op of a symbolic if's branch)
# is written once as a YAML anchor and named by its alias after that
_ANCHORED_COND = 60
_COND_SLOT = "__cond__"


def _op_line(stmt: OpRec, name_of, anchors: dict) -> str:
    op = _op_dict(stmt, name_of)
    cond = op.get("cond")
    if cond is None or len(cond) <= _ANCHORED_COND:
        return _flow(op)
    text = _flow({**op, "cond": _COND_SLOT})
    if cond in anchors:
        ref = f"*{anchors[cond]}"
    else:
        anchors[cond] = f"if{len(anchors) + 1}"
        quoted = yaml.safe_dump(cond, default_style="'", width=10**6).strip()
        ref = f"&{anchors[cond]} {quoted[:-3].strip() if quoted.endswith('...') else quoted}"
    return text.replace(f"cond: {_COND_SLOT}", f"cond: {ref}", 1)


def _lines(body, name_of, tiles: _Tiles, indent: str, out: list, anchors: dict) -> None:
    for stmt in body:
        if isinstance(stmt, OpRec):
            out.append(f"{indent}- {_op_line(stmt, name_of, anchors)}")
        elif isinstance(stmt, StateRec):
            value = stmt.value
            if stmt.key == "set_vec_tile_shapes":
                value = tiles.name("vec", value)
            elif stmt.key == "set_cube_tile_shapes":
                value = tiles.name("cube", value)
            elif isinstance(value, dict):
                value = dict(value)     # recorded frozen; YAML writes plain mappings
            out.append(f"{indent}- {_flow({stmt.key: value})}   # {_at(stmt.where)}")
        else:
            assert isinstance(stmt, LoopRec)
            out.append(f"{indent}- loop: {_flow(stmt.head)}   # {_at(stmt.where)}")
            out.append(f"{indent}  body:")
            _lines(stmt.body, name_of, tiles, indent + "    ", out, anchors)


def _tensor_line(decl, name: str) -> str:
    spec = {"shape": decl.shape, "dtype": decl.dtype}
    if decl.format != "ND":
        spec["format"] = decl.format
    spec["role"] = decl.role
    if decl.control_flow_input:
        spec["control_flow_input"] = True
    elif decl.data_values:
        spec["control_flow_input"] = False   # its values place data; the leaf tasks read them
    if decl.cache_policy != "default":
        spec["cache_policy"] = decl.cache_policy
    if decl.fresh_per is not None:
        spec["fresh_per"] = decl.fresh_per
    comment = f"   # {_at(decl.where)}" if decl.where else ""
    return f"  {name}: {_flow(spec)}{comment}"


def kernel_text(traced: Traced, command: str) -> str:
    R = traced.recorder
    R.final_names()
    tiles = _Tiles()
    body: list[str] = []
    _lines(R.body, R.name_of, tiles, "  ", body, {})
    if not body:
        raise ValueError("empty body")
    head = [f"# Imported by `ptolab import` from {traced.source.as_posix()} "
            f"(sha256 {traced.sha256}), function {traced.function}.",
            f"# Re-import when the source changes: {command}"]
    # a note an op repeats (the same call in every unrolled body) is said once
    head += [f"# note: {n}" for n in dict.fromkeys(R.notes)]
    lines = head + [f"name: {_flow(traced.function)}"]
    if traced.description:
        lines.append(f"description: {_flow(traced.description)}")
    if R.params:
        lines.append(f"params: {_flow(R.params)}")
    lines.append("tensors:")
    lines += [_tensor_line(d, R.name_of(d.slot)) for d in R.decls]
    if tiles.table:
        lines.append("tiles:")
        lines += [f"  {n}: {_flow(v)}" for n, v in tiles.table.items()]
    read = {d.slot.hint for d in R.decls if d.control_flow_input or d.data_values}
    values = {n: v for n, v in R.values.items() if n in read}
    if values:
        lines.append("values:   # data the kernel reads as scalars (--arg NAME.values=...)")
        lines += [f"  {n}: {_flow(v)}" for n, v in values.items()]
    lines.append("body:")
    lines += body
    if traced.options:
        lines.append("options:")
        lines += [f"  {group}: {_flow(values)}" for group, values in traced.options.items()]
    text = "\n".join(lines) + "\n"
    validate(Kernel, yaml.safe_load(text), f"{traced.source} (as traced)", "kernel")
    return text
