"""What a traced kernel did, in order: tensors, ops, loops, tile shapes, scopes, conditions.

The stand-in ``pypto`` module (standin.py) calls into one ``Recorder`` while the kernel
runs.  Values are named late: an op's output is a ``Slot`` whose name comes from the
variable the kernel assigned it to, and the two branches of a symbolic ``if`` that bind
the same variable tie their slots into one name (the kernel language's way of merging
branches: ops with the same ``out`` under exclusive ``cond``s).
"""
from __future__ import annotations

import ast
import keyword
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import Unsupported
from .symbols import SymInt, as_dim


@dataclass(eq=False)
class Slot:
    hint: str
    fixed: bool = False          # a kernel argument keeps its parameter name
    named: bool = False          # the hint came from an assignment
    parent: "Slot | None" = None

    def root(self) -> "Slot":
        slot = self
        while slot.parent is not None:
            slot = slot.parent
        return slot


@dataclass(eq=False)
class TensorDecl:
    """A GM tensor of the kernel: an argument or a ``pypto.tensor`` temporary."""
    slot: Slot
    shape: list
    dtype: str
    format: str = "ND"
    role: str = "input"
    cache_policy: str = "default"
    where: str = ""
    control_flow_input: bool = False     # its elements are read as scalars by the control flow
    data_values: bool = False            # its elements place data (scatter_update's rows)
    fresh_per: str | None = None         # made in this pypto.loop's body: memory per iteration


def _as_now(value):
    """A traced tensor as it is when an op reads or writes it: ``Tensor.move`` rebinds a
    tensor to another value (upstream's move assignment), which must not change what
    earlier ops recorded."""
    if not hasattr(value, "_shape"):
        return value
    now = object.__new__(type(value))      # Tensor.__new__ would declare a tensor
    now.__dict__.update(vars(value))
    return now


@dataclass(eq=False)
class OpRec:
    fields: dict
    inputs: list                 # traced values
    out: Any                     # Slot (new value) or a traced value (assemble target)
    where: str
    cond: tuple = ()


@dataclass(eq=False)
class LoopRec:
    head: dict
    where: str
    body: list = field(default_factory=list)


@dataclass(eq=False)
class StateRec:
    key: str                     # one of _STATE_KEYS
    value: Any
    where: str


_STATE_KEYS = ("set_vec_tile_shapes", "set_cube_tile_shapes", "sg_set_scope",
               "set_operation_options")
# ops that need none of the state: windows on GM and writes into GM tensors (a matmul needs
# the cube TileShape and not the vector one, every other op the reverse)
_STATELESS_OPS = ("view", "assemble", "scatter_update", "rename")


class _Differs:
    """A state the two branches of a symbolic if left different: after the if it depends on
    data.  It equals nothing, so the next set of it is written out; an op that needs it
    before that stops."""

    def __init__(self, where: str, after_if, after_else):
        self.where, self.after_if, self.after_else = where, after_if, after_else

    def __eq__(self, other):
        return False

    __hash__ = object.__hash__


_NAME = re.compile(r"[^A-Za-z0-9_]")


class Recorder:
    def __init__(self, function: str, source: Path, shown: str):
        self.function, self.source, self.shown = function, str(source.resolve()), shown
        self.params: dict[str, int] = {}
        self.decls: list[TensorDecl] = []
        self.body: list = []
        self.stack: list[list] = [self.body]
        self.conds: list[str] = []
        self.segment = 0
        self.state: dict[str, Any] = {k: None for k in _STATE_KEYS}
        # no scope is what sg_set_scope=-1 resets to: a branch or loop that ends on -1
        # leaves the state it found
        self.state["sg_set_scope"] = -1
        self.label: str | None = None
        self.active_idx: list[str] = []
        self.pypto_loops: list[str] = []     # names of the enclosing pypto.loops, innermost last
        self.used_names: set[str] = set()
        self.loop_count = 0
        self.notes: list[str] = []
        self.span: str | None = None     # set inside an op_wrapper function: its call site
        self.options: dict[str, dict] = {}
        # data of tensor arguments the kernel reads elements of (--arg NAME.values=...)
        self.values: dict[str, list] = {}
        # on-chip values spilled to a GM workspace, by id: (the value, the view read instead)
        self._spills: dict[int, tuple] = {}

    # -- where am I ---------------------------------------------------------------------
    def where(self) -> str:
        if self.span is not None:
            return self.span
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == self.source:
                return f"{self.shown}:{frame.f_lineno}"
            frame = frame.f_back
        return self.shown

    def fail(self, what: str, supported="", hint: str = "") -> Unsupported:
        return Unsupported(what, where=self.where(), function=self.function,
                           supported=supported, hint=hint)

    # -- names ----------------------------------------------------------------------------
    def reserve(self, hint: str) -> str:
        """A fresh identifier for a param, loop or loop index."""
        base = _identifier(hint)
        name, n = base, 2
        while name in self.used_names:
            name, n = f"{base}_{n}", n + 1
        self.used_names.add(name)
        return name

    def add_param(self, name: str, value: int) -> SymInt:
        name = self.reserve(name)
        self.params[name] = int(value)
        return SymInt(name, int(value))

    def on_concrete(self, sym: SymInt, reason: str) -> int:
        if sym.value is None:
            raise self.fail(f"the symbolic value '{sym.text}' {reason}; it depends on a "
                            f"loop index, which has no value while tracing",
                            hint="keep loop indices in shapes, offsets, pypto.cond/if tests and "
                                 "loop bounds; a Python range/list needs a static int")
        note = f"'{sym.text}' = {sym.value} {reason} at {self.where()}: the config holds " \
               f"that value, re-import to change it"
        if note not in self.notes:
            self.notes.append(note)
        return sym.value

    def check_dims(self, dims, what: str) -> list:
        """Dims as config values; a name must be a param or an enclosing loop index."""
        out = []
        for d in dims:
            try:
                value = d if isinstance(d, str) else as_dim(d)
            except TypeError:
                raise self.fail(f"{what} {list(dims)!r} holds {d!r}, which is not an int or a "
                                f"symbolic int") from None
            if isinstance(value, str):
                known = set(self.params) | set(self.active_idx) | {
                    f"{i}_unroll" for i in self.active_idx} | {"min", "max", "ceil_div"} | set(
                    self.values)
                for node in ast.walk(ast.parse(value, mode="eval")):
                    if isinstance(node, ast.Name) and node.id not in known:
                        raise self.fail(f"{what} uses '{node.id}' ({value}), a loop index "
                                        f"outside its pypto.loop")
            out.append(value)
        return out

    # -- tensors ----------------------------------------------------------------------------
    def declare(self, decl: TensorDecl) -> TensorDecl:
        self.decls.append(decl)
        return decl

    # -- statements --------------------------------------------------------------------------
    def op(self, fields: dict, inputs: list, out, where: str) -> OpRec:
        inputs = [self.reachable(v) for v in inputs]
        for value in inputs + ([out] if hasattr(out, "slot") else []):
            self.check_usable(value)
        self._check_state(fields["op"])
        if self.label is not None:
            fields.setdefault("label", self.label)
        rec = OpRec(fields, [_as_now(v) for v in inputs], _as_now(out), where,
                    tuple(self.conds))
        self.stack[-1].append(rec)
        return rec

    def written(self, decl) -> bool:
        """Whether any op recorded so far writes the tensor ``decl`` declares."""
        return _writes(self.body, decl)    # open loop bodies hang in it already

    def window(self, fields: dict, inputs: list, out, where: str) -> OpRec:
        """A view or in-place reshape of GM: only a window on a tensor, costing nothing, so
        it is declared in each root function that uses it, where it is first used."""
        if self.label is not None:
            fields.setdefault("label", self.label)
        return OpRec(fields, [_as_now(v) for v in inputs], out, where, tuple(self.conds))

    def reachable(self, value):
        """An on-chip value used in another root function than the one that made it goes
        through GM, as upstream spills it to a workspace: its producer also writes it into a
        kernel temporary right after making it, and the use reads a view of that.  A value
        made under a condition, or whose shape names a loop index, stays where it is (and
        check_usable says why)."""
        if getattr(value, "kind", None) != "local" or self.segment in value.present \
                or value.conds:
            return value
        if id(value) not in self._spills:
            spilled = self._spill(value)
            if spilled is None:
                return value
            self._spills[id(value)] = (value, *spilled)
        return self._spills[id(value)][1]

    def workspace_of(self, value):
        """The GM workspace tensor a spilled on-chip value goes through, or None."""
        spilled = self._spills.get(id(value))
        return spilled[2] if spilled is not None else None

    def _spill(self, value):
        from . import ops, tensor     # they record through this module: imported late
        found = _producer(self.body, value.slot)
        if found is None:
            return None
        body, index, rec = found
        try:
            dims = self.check_dims(value.shape, "shape")
        except Unsupported:
            return None
        hint = value.slot.root().hint
        # upstream hands such a value on in memory of the producing call's own (an
        # exclusive outcast): written anew in each iteration of the producer's loop
        loops = getattr(value, "loops", ())
        decl = self.declare(TensorDecl(Slot(f"{hint}_ws"), dims,
                                       tensor.schema_dtype(value.dtype), "ND", "temporary",
                                       where=value.where,
                                       fresh_per=loops[-1] if loops else None))
        temp = tensor.make("temp", value.shape, value.dtype, decl.slot.hint, decl)
        body.insert(index + 1, OpRec({"op": "assemble", "offsets": [0] * len(dims)},
                                     [_as_now(value)], temp, rec.where, rec.cond))
        self.notes.append(f"'{hint}' (made at {value.where}) is used in another root function "
                          f"at {self.where()}: it goes through the GM workspace tensor "
                          f"'{decl.slot.hint}', as upstream spills it")
        # the workspace holds the value wherever it is used, whatever branch used it first
        conds, self.conds = self.conds, type(self.conds)()
        try:
            return ops.view(temp, list(value.shape), [0] * len(dims)), temp
        finally:
            self.conds = conds

    def _check_state(self, op: str) -> None:
        if op in _STATELESS_OPS:
            return
        skip = "set_vec_tile_shapes" if op == "matmul" else "set_cube_tile_shapes"
        for key in _STATE_KEYS:
            value = self.state[key]
            if key != skip and isinstance(value, _Differs):
                raise self.fail(
                    f"'{op}' needs {key}, which the branches of the symbolic if at "
                    f"{value.where} leave different ({value.after_if!r} after the if branch, "
                    f"{value.after_else!r} after the else): here it would depend on data",
                    hint=f"set {key} again before this op, or the same at the end of both "
                         f"branches")

    def _restore(self, key: str, value) -> None:
        """Back to an earlier state: written out when it is a value; no statement unsets a
        TileShape or makes it unknown, so then the next set is written out again."""
        if value is None or isinstance(value, _Differs):
            self.state[key] = value
        else:
            self.set_state(key, value)

    def check_usable(self, value) -> None:
        if value.decl is not None and value.kind != "view":
            return          # a kernel tensor is visible everywhere
        if value.kind == "view" and self.segment not in value.present:
            self._declare_window(value)
        if self.segment not in value.present:
            raise self.fail(f"'{value.slot.root().hint}' (made at {value.where}) is used in "
                            f"another root function than the one that made it (across a "
                            f"pypto.loop boundary); between root functions a value travels "
                            f"through a GM tensor, and ptolab does not yet put an on-chip "
                            f"value into one for you (upstream spills it to a workspace)",
                            hint="assemble it into a pypto.tensor and view that tensor where "
                                 "it is needed")
        if tuple(self.conds[:len(value.conds)]) != tuple(value.conds):
            raise self.fail(f"'{value.slot.root().hint}' (made at {value.where}) exists only "
                            f"where {' and '.join(value.conds)}, and is used where that is not "
                            f"known to hold",
                            hint="bind the variable in both branches of the if")

    def _declare_window(self, value) -> None:
        rec = value.defined_by
        for name in ("shape", "offsets", "valid_shape"):
            if name in rec.fields:
                self.check_dims(rec.fields[name], f"{rec.fields['op']} {name} (from {rec.where})")
        for source in rec.inputs:
            self.check_usable(source)
        self.stack[-1].append(OpRec(dict(rec.fields), list(rec.inputs), rec.out, rec.where,
                                    rec.cond))
        value.present.add(self.segment)

    def set_state(self, key: str, value) -> None:
        if self.state[key] != value:
            self.state[key] = value
            self.stack[-1].append(StateRec(key, value, self.where()))

    # -- loops --------------------------------------------------------------------------------
    def loop_begin(self, head: dict, where: str) -> tuple[LoopRec, dict]:
        if self.conds:
            raise self.fail("a pypto.loop inside a symbolic if is not supported yet (a loop "
                            "statement carries no condition)")
        rec = LoopRec(head, where)
        self.stack[-1].append(rec)
        self.stack.append(rec.body)
        self.active_idx.append(head["idx"])
        if head.get("style", "pypto") == "pypto":
            self.segment += 1
            self.pypto_loops.append(head["name"])
        return rec, dict(self.state)

    def loop_end(self, rec: LoopRec, entry: dict) -> None:
        if self.stack[-1] is not rec.body:
            raise self.fail("a pypto.loop body ended early (break, return or an exception "
                            "inside it); break and continue are not supported")
        self.stack.pop()
        self.active_idx.pop()
        if rec.head.get("style", "pypto") == "pypto":
            self.segment += 1
            self.pypto_loops.pop()
        if not rec.body:
            raise self.fail(f"pypto.loop '{rec.head['name']}' has an empty body")
        # Upstream scopes tile shapes and scope per loop: every iteration starts from the
        # state at loop entry, and the state after the loop is that state again.
        # (A state first set inside the loop is unset again after it: the next set, in a
        # later loop_unroll copy say, is written out.)
        changed = [k for k in _STATE_KEYS if self.state[k] != entry[k]]
        rec.body[:0] = [StateRec(k, entry[k], rec.where) for k in changed
                        if entry[k] is not None and not isinstance(entry[k], _Differs)]
        for k in changed:
            self._restore(k, entry[k])

    # -- symbolic if ----------------------------------------------------------------------------
    def branch_begin(self, cond: str) -> dict:
        self.conds.append(cond)
        return {**self.state, "label": self.label, "where": self.where()}

    def branch_switch(self, cond: str, pre: dict) -> dict:
        after_a = {**self.state, "where": pre["where"]}
        self.conds[-1] = f"not ({cond})"
        self.label = pre["label"]        # the else branch starts from the state before the if
        for k in _STATE_KEYS:
            if self.state[k] != pre[k]:
                self._restore(k, pre[k])
        return after_a

    def branch_end(self, after_a: dict) -> None:
        self.conds.pop()
        # a state the branches leave different is unknown after the if: an op that needs it
        # stops (_check_state) unless a set comes first
        for k in _STATE_KEYS:
            if self.state[k] != after_a[k]:
                self.state[k] = _Differs(after_a["where"], after_a[k], self.state[k])

    def tie(self, a, b):
        """Both branches bound one variable: one name, existing where the if exists."""
        ra, rb = a.slot.root(), b.slot.root()
        if ra is not rb:
            rb.parent = ra
        b.conds = tuple(self.conds)
        return b

    # -- output ---------------------------------------------------------------------------------
    def final_names(self) -> None:
        """Give every slot its config name: arguments keep theirs, the rest are made unique."""
        taken = set(self.params) | set(self.used_names)
        taken |= {d.slot.hint for d in self.decls if d.slot.fixed}
        seen: dict[int, str] = {}

        def name_of(slot: Slot) -> str:
            root = slot.root()
            if root.fixed:
                return root.hint
            if id(root) not in seen:
                base = _identifier(root.hint)
                name, n = base, 2
                while name in taken:
                    name, n = f"{base}_{n}", n + 1
                taken.add(name)
                seen[id(root)] = name
            return seen[id(root)]
        for decl in self.decls:
            name_of(decl.slot)
        self.name_of = name_of


def _writes(body: list, decl) -> bool:
    """Whether an op recorded in ``body`` (through loop bodies) writes the tensor ``decl``
    declares, whole or through a view of it."""
    for stmt in body:
        if isinstance(stmt, OpRec) and (getattr(stmt.out, "decl", None) is decl
                                        or getattr(stmt.out, "slot", stmt.out) is decl.slot):
            return True
        if isinstance(stmt, LoopRec) and _writes(stmt.body, decl):
            return True
    return False


def _producer(body: list, slot):
    """(the list, index, OpRec) of the op that made ``slot``, searched through loop bodies."""
    for i, stmt in enumerate(body):
        if isinstance(stmt, OpRec) and stmt.out is slot:
            return body, i, stmt
        if isinstance(stmt, LoopRec):
            found = _producer(stmt.body, slot)
            if found is not None:
                return found
    return None


def _identifier(hint: str) -> str:
    name = _NAME.sub("_", hint) or "t"
    if name[0].isdigit():
        name = "t" + name
    if keyword.iskeyword(name) or name in ("min", "max", "ceil_div"):
        name += "_"
    return name
