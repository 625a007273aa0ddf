"""Trace a kernel's body into root calls of concrete ops.

This is what running the Python of a PyPTO kernel does at compile time: params
and loop indices become numbers, a Python ``for`` unrolls in place, every
iteration of a ``pypto.loop`` becomes one call of that loop's root function, and
``unroll_list`` splits the trip count greedily into unrolled chunks, each chunk
one root call holding several loop bodies.
"""
from __future__ import annotations

import re

from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from ..spec.errors import ConfigError
from ..spec.expr import ExprError, evaluate
from ..spec.kernel import (CubeTile, CubeTileStmt, Kernel, LoopStmt, OperationOptionsStmt,
                           OpStmt, ScopeStmt, TileStmt)
from .records import made


@dataclass(frozen=True)
class CubeTiles:
    m: tuple[int, int]
    k: tuple[int, int, int]        # L0, kAL1, kBL1
    n: tuple[int, int]
    split_k: bool
    multi_data_load: bool = False


class Scope(NamedTuple):
    """The ``sg_set_scope`` an op was traced under."""
    id: int                          # -1: no scope
    allow_parallel_merge: bool       # every tile of the scope's ops in one leaf task
    allow_cross_scope_merge: bool
    loop_body: tuple[tuple[str, int], ...]   # loop indices: unrolled bodies keep their own


NO_SCOPE = Scope(-1, False, False, ())


@dataclass(frozen=True)
class TracedOp:
    op: str
    inputs: tuple[str, ...]
    out: str
    where: str                      # field path in the kernel file, for errors
    vec_tile: tuple[int, ...] | None
    cube_tile: CubeTiles | None
    scope: Scope
    attrs: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    label: str = ""

    def get(self, key, default=None):
        return self.attrs.get(key, default)


@dataclass
class RootCall:
    root_key: str                   # identifies the root function
    ops: list[TracedOp] = field(default_factory=list)
    bodies: int = 1                 # loop bodies (unroll units) this call holds
    parallel: bool = False
    # each fresh_per tensor instance the call names -> its tensor and its order of first
    # use in the call ("t@#0"): calls of other iterations then compare alike, and a call
    # taking another's tasks takes them instance for instance (compiler/callcache.py)
    instances: dict[str, str] = field(default_factory=dict)
    # how many instances of each tensor ``instances`` holds, so numbering the next is O(1)
    instance_counts: dict[str, int] = field(default_factory=dict, compare=False, repr=False)
    # each tensor a ``rename`` made another name of an on-chip value: the rename op, whose
    # ``out`` is that value's name in the call; the call writes the value into the tensor
    # when it ends (_Tracer.flush)
    renamed: dict[str, TracedOp] = field(default_factory=dict)
    renames: int = 0


@dataclass
class Trace:
    calls: list[RootCall]

    @property
    def loop_bodies(self) -> int:
        return sum(c.bodies for c in self.calls)


_LOOP_UNROLL = re.compile(r"_LoopUnroll(\d+)$")
# ops that read their input as GM data, or give a view of it an assemble may write into:
# a renamed tensor's value is stored before them, and they read the tensor
_GM_READERS = ("view", "reshape", "move", "gather", "scatter_update", "gather_in_ub")


def unroll_times(loop_name: str) -> int:
    """The loop bodies one iteration of a ``pypto.loop_unroll`` loop stands for.

    Upstream's ``loop_unroll`` makes one loop per factor p, named ``<name>_LoopUnroll<p>``,
    each iteration doing p steps' work, and its backend reads p back from that name
    (python/pypto/_controller.py): a stitch counts such an iteration as p loop bodies, as
    it counts an ``unroll_list`` chunk of p."""
    m = _LOOP_UNROLL.search(loop_name or "")
    return int(m.group(1)) if m else 1


def unroll_chunks(trip: int, unroll_list: list[int] | None) -> list[int]:
    """Greedy decomposition: 13 with [8, 4, 2] -> [8, 4, 1] (1 is always added)."""
    if not unroll_list:
        return [1] * trip
    chunks, remaining = [], trip
    for u in sorted(set(unroll_list) | {1}, reverse=True):
        n, remaining = divmod(remaining, u)   # what is left goes to the smaller factors
        chunks += [u] * n
    return chunks


_DIM_ATTRS = ("shape", "offsets", "valid_shape")
_INT_ATTRS = ("block_rows", "first_block", "count", "permute", "k", "block_size")

_PLAIN_ATTRS = ("scalar", "dtype", "axis", "keepdim", "a_trans", "b_trans", "perm", "inplace",
                "value", "src", "largest", "part", "transposed_batch")


class _OpPlan:
    """What tracing an op statement needs, sorted once: the attributes that never change,
    those already numbers, and the expressions each iteration evaluates."""

    def __init__(self, stmt: OpStmt):
        self.inputs = tuple(stmt.inputs)
        self.label = stmt.label or ""
        fixed: dict[str, Any] = {}
        self.dims: list[tuple[str, list]] = []
        self.ints: list[tuple[str, Any]] = []
        for key in _DIM_ATTRS:
            dims = getattr(stmt, key)
            if dims is None:
                continue
            if all(isinstance(d, int) for d in dims):
                fixed[key] = tuple(int(d) for d in dims)
            else:
                fixed[key] = None       # keeps the key's place in the attributes' order
                self.dims.append((key, dims))
        for key in _INT_ATTRS:
            value = getattr(stmt, key)
            if value is None:
                continue
            if isinstance(value, int):
                fixed[key] = int(value)
            else:
                fixed[key] = None
                self.ints.append((key, value))
        for key in _PLAIN_ATTRS:
            value = getattr(stmt, key)
            # hashable, as the call cache's key needs (a transpose's perm is a list)
            fixed[key] = tuple(value) if isinstance(value, list) else value
        self.fixed = fixed
        # with nothing to evaluate, every op of the statement has the same attributes
        self.shared = None if self.dims or self.ints else \
            {False: SharedAttrs(fixed), True: SharedAttrs(fixed, combine_axis=True)}


def attr_items(attrs: dict) -> tuple:
    """An op's attributes as a tuple of items: made once for a statement's SharedAttrs."""
    return getattr(attrs, "items_tuple", None) or tuple(attrs.items())


class SharedAttrs(dict):
    """The attributes of every op one statement traces, when none is evaluated: one dict
    for them all, which nothing changes, and its items as a tuple made once (the call
    cache's key holds them for each op of each call)."""
    __slots__ = ("items_tuple",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.items_tuple = tuple(self.items())



class _Tracer:
    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.calls: list[RootCall] = []
        self.current = RootCall(root_key=f"{kernel.name}_main")
        self.vec_tile: tuple[int, ...] | None = None
        self.cube_tile: CubeTiles | None = None
        # set_pass_options(sg_set_scope=...) at the kernel's level (its jit options) puts
        # every op in that scope until a body statement sets another
        scope_id, parallel, cross = kernel.options.pass_options.sg_set_scope
        self.scope = NO_SCOPE if scope_id == -1 else Scope(scope_id, parallel, cross, ())
        self.combine_axis = False       # upstream's operation_options default
        self.loop_env: dict[str, int] = {}
        self.segment = 0
        # temporaries with memory of their own per iteration of a loop: traced under an
        # instance name per iteration (``instance_name``), so iterations share no buffer
        self.fresh = {n: t.fresh_per for n, t in kernel.tensors.items() if t.fresh_per}
        self.iterations: dict[str, int] = {}    # loop name -> iterations begun so far
        # a renamed temporary's value stored into GM goes to memory of its own (upstream:
        # the repointed tensor is the value's, an outcast of its root call, and the
        # runtime gives each root call's outcasts their own workspace), so readers of
        # the earlier value need not finish before it lands: buffer -> stores so far
        self.generations: dict[str, int] = {}
        self._plans: dict[int, _OpPlan] = {}     # by id of a statement of self.kernel
        self._heres: dict[str, list[str]] = {}   # a body's path: its statements' paths

    def _value(self, text, env, where: str) -> int:
        try:
            return evaluate(text, env)
        except ExprError as exc:
            raise ConfigError(f"field '{where}': {exc}.") from None

    def _dims(self, dims, env, where: str) -> tuple[int, ...]:
        return tuple(self._value(d, env, f"{where}[{i}]") for i, d in enumerate(dims))

    def flush(self, next_key: str | None = None) -> None:
        for tensor in list(self.current.renamed):
            self._write_renamed(tensor)
        if self.current.ops:
            self.calls.append(self.current)
        self.segment += 1
        self.current = RootCall(root_key=next_key or f"{self.kernel.name}_main{self.segment}")

    def run(self, body, env: dict[str, int], where: str) -> None:
        heres = self._heres.get(where)
        if heres is None or len(heres) != len(body):
            # a loop body runs once per iteration: its statements' paths are made once
            heres = self._heres[where] = [f"{where}[{i}]" for i in range(len(body))]
        for here, stmt in zip(heres, body):
            if isinstance(stmt, TileStmt):
                self._set_vec_tile(stmt, env, here)
            elif isinstance(stmt, CubeTileStmt):
                self._set_cube_tile(stmt, env, here)
            elif isinstance(stmt, ScopeStmt):
                self.scope = Scope(*stmt.sg_set_scope, tuple(sorted(self.loop_env.items())))
            elif isinstance(stmt, OperationOptionsStmt):
                if stmt.set_operation_options.combine_axis is not None:
                    self.combine_axis = stmt.set_operation_options.combine_axis
            elif isinstance(stmt, OpStmt):
                if stmt.cond is None or self._value(stmt.cond, env, f"{here}.cond"):
                    op = self._op(stmt, env, here)
                    if stored_of(op.out) in self.current.renamed and op.op != "rename":
                        # a write into a renamed tensor writes its memory: the value it
                        # names goes there first, and the write lands beside it
                        self._write_renamed(stored_of(op.out))
                        op = made(TracedOp, **{**vars(op), "out": self._storage(stmt.out)})
                    if op.op == "rename":
                        op = self._rename(op)
                    self._append(op)
            else:
                self._loop(stmt, env, here)

    def _set_vec_tile(self, stmt: TileStmt, env, here: str) -> None:
        ref = stmt.set_vec_tile_shapes
        dims = self.kernel.tiles[ref] if isinstance(ref, str) else ref
        self.vec_tile = self._dims(dims, env, f"{here}.set_vec_tile_shapes")
        if any(d <= 0 for d in self.vec_tile) or len(self.vec_tile) > 4:
            raise ConfigError(f"field '{here}.set_vec_tile_shapes': give 1 to 4 dims, each "
                              f"> 0; got {list(self.vec_tile)}.")

    def _set_cube_tile(self, stmt: CubeTileStmt, env, here: str) -> None:
        ref = stmt.set_cube_tile_shapes
        tile: CubeTile = self.kernel.tiles[ref] if isinstance(ref, str) else ref
        where = f"{here}.set_cube_tile_shapes"
        m = self._dims(tile.m, env, f"{where}.m")
        k = self._dims(tile.k, env, f"{where}.k")
        n = self._dims(tile.n, env, f"{where}.n")
        k = k if len(k) == 3 else (k[0], k[1], k[1])
        for axis, (l0, *l1s) in (("m", m), ("k", k), ("n", n)):
            for l1 in l1s:
                if l0 <= 0 or l0 > l1 or l1 % l0:
                    raise ConfigError(f"field '{where}.{axis}': need 0 < L0 <= L1 and L1 % L0 "
                                      f"== 0, got L0={l0}, L1={l1}.")
        self.cube_tile = CubeTiles(m, k, n, tile.enable_split_k, tile.enable_multi_data_load)

    def _op(self, stmt: OpStmt, env, where: str) -> TracedOp:
        plan = self._plans.get(id(stmt))
        if plan is None:
            plan = self._plans[id(stmt)] = _OpPlan(stmt)
        attrs = plan.shared[bool(self.combine_axis)] if plan.shared is not None \
            else self._attrs(plan, env, where)
        if attrs.get("src"):
            # an imported kernel's op: errors name the Python line that wrote it too
            where = f"{where} at {attrs['src']}"
        inputs, out = plan.inputs, stmt.out
        if self.fresh or self.generations:
            inputs = tuple(self._storage(n) for n in inputs)
            # a rename names the tensor, not the memory it is stored in
            out = self._instance(out) if stmt.op == "rename" else self._storage(out)
        if self.current.renamed:
            renamed = self.current.renamed
            if stmt.op in _GM_READERS:
                # ops that take GM data (and a view or reshape that may be written
                # through) read the tensor's memory: the value goes there first
                stored = dict.fromkeys(b for n in inputs if (b := stored_of(n)) in renamed)
                if stored:
                    for name in stored:
                        self._write_renamed(name)
                    inputs = tuple(self._storage(n) for n in plan.inputs)
                    out = self._storage(stmt.out)       # a GM reader is no rename
            else:
                inputs = tuple(renamed[b].out if (b := stored_of(n)) in renamed else n
                               for n in inputs)
        return _traced(stmt.op, inputs, out, where, self.vec_tile, self.cube_tile, self.scope,
                       attrs, plan.label)

    def _rename(self, op: TracedOp) -> TracedOp:
        """``tensor[:] = value`` (upstream's Tensor.move, tensor.cpp: no op, the tensor object
        is repointed): ops of this root call after it that name the tensor read the value
        on chip, under a name of its own; the tensor's memory gets the value when the call
        ends.  So a running state carried through an unrolled loop (glm_attention's max,
        sum and output) goes through GM once per root call, not once per loop body."""
        tensor = op.out
        spec = self.kernel.tensors.get(tensor_of(tensor))
        if spec is None:
            raise ConfigError(f"field '{op.where}.out': rename names a tensor of 'tensors' "
                              f"(upstream's tensor[:] = value); '{tensor}' is none.")
        # the same name in every call that renames alike (the call cache compares them)
        alias = f"{tensor_of(tensor)}~{self.current.renames}"
        self.current.renames += 1
        renamed = made(TracedOp, **{**vars(op), "out": alias})
        self.current.renamed[tensor] = renamed
        return renamed

    def _write_renamed(self, tensor: str) -> None:
        """The value a renamed tensor names, assembled into the tensor's memory: for a
        temporary, memory of the value's own, which later ops of the tensor use."""
        rename = self.current.renamed.pop(tensor)
        spec = self.kernel.tensors[tensor_of(tensor)]
        if spec.role == "temporary":
            self.generations[tensor] = self.generations.get(tensor, 0) + 1
            tensor = self._storage(tensor)
        self._append(_traced(
            "assemble", (rename.out,), tensor, rename.where, rename.vec_tile, rename.cube_tile,
            rename.scope, {**rename.attrs, "offsets": (0,) * len(spec.shape)}, rename.label))

    def _attrs(self, plan: _OpPlan, env, where: str) -> dict:
        """An op's attributes with its dims and ints evaluated in ``env``."""
        attrs = dict(plan.fixed)
        for key, dims in plan.dims:
            try:
                attrs[key] = tuple(evaluate(d, env) for d in dims)
            except ExprError:
                attrs[key] = self._dims(dims, env, f"{where}.{key}")   # names the dim
        for key, text in plan.ints:
            attrs[key] = self._value(text, env, f"{where}.{key}")
        if self.combine_axis:
            attrs["combine_axis"] = True
        return attrs

    def _storage(self, name: str) -> str:
        """The buffer a tensor name stands for now: its instance of the current iteration
        (``_instance``), in the memory its latest stored renamed value went to."""
        buffer = self._instance(name)
        stores = self.generations.get(buffer)
        if not stores:
            return buffer
        return f"{buffer}^{stores}" if "@" in buffer else f"{buffer}@^{stores}"

    def _instance(self, name: str) -> str:
        """The instance of the loop's current iteration (after the loop, its last):
        a tensor made in the loop body is a new one each time round, so an iteration
        cannot read what an earlier one wrote."""
        loop = self.fresh.get(name)
        return name if loop is None else instance_name(name, self.iterations.get(loop, 0))

    def _append(self, op: TracedOp) -> None:
        """``op`` joins the call; the per-iteration and per-store buffers it names are
        numbered in the call's order of first use (``RootCall.instances``)."""
        if not (self.fresh or self.generations):    # no such buffer: nothing to number
            self.current.ops.append(op)
            return
        seen, counts = self.current.instances, self.current.instance_counts
        for name in (*op.inputs, op.out):
            if name not in seen and ("^" in name or tensor_of(name) in self.fresh):
                tensor = tensor_of(name)
                number = counts.get(tensor, 0)
                counts[tensor] = number + 1
                seen[name] = f"{tensor}@#{number}"
        self.current.ops.append(op)

    def _loop(self, stmt: LoopStmt, env, where: str) -> None:
        head = stmt.loop
        trip = self._value(head.trip, env, f"{where}.loop.trip")
        if trip < 0:
            raise ConfigError(f"field '{where}.loop.trip' evaluates to {trip}; a trip count "
                              f"must be >= 0.")
        if head.style == "for":
            for i in range(trip):
                self.loop_env[head.idx] = i
                self.run(stmt.body, {**env, head.idx: i}, f"{where}.body")
            self.loop_env.pop(head.idx, None)
            return
        resume_key = self.current.root_key
        self.flush()   # ops before the loop form their own root call
        i = 0
        times = unroll_times(head.name)
        for u in unroll_chunks(trip, head.unroll_list):
            key = head.name if not head.unroll_list else f"{head.name}_unroll{u}"
            self.current = RootCall(root_key=key, bodies=u * times, parallel=head.parallel)
            for _ in range(u):
                self.loop_env[head.idx] = i
                self.iterations[head.name] = self.iterations.get(head.name, 0) + 1
                self.run(stmt.body, {**env, head.idx: i, f"{head.idx}_unroll": u},
                         f"{where}.body")
                i += 1
            self.flush()
        self.loop_env.pop(head.idx, None)
        self.current = replace(self.current, root_key=f"{resume_key}_after_{head.name}")


def _traced(op, inputs, out, where, vec_tile, cube_tile, scope, attrs, label) -> TracedOp:
    """``TracedOp(...)`` without the frozen dataclass's per-field ``object.__setattr__``:
    the tracer makes one per op of every iteration."""
    return made(TracedOp, op=op, inputs=inputs, out=out, where=where, vec_tile=vec_tile,
                cube_tile=cube_tile, scope=scope, attrs=attrs, label=label)


def instance_name(tensor: str, iteration: int) -> str:
    """The buffer of a ``fresh_per`` temporary in the loop's ``iteration``-th iteration
    (counted over the whole run, so the iterations of nested loops stay apart)."""
    return f"{tensor}@{iteration}"


def stored_of(buffer: str) -> str:
    """The tensor instance a renamed value's stored memory belongs to ("t@^2" -> "t",
    "t@3^1" -> "t@3"); any other buffer is its own."""
    return buffer.split("^", 1)[0].removesuffix("@") if "^" in buffer else buffer


def tensor_of(buffer: str) -> str:
    """The kernel tensor a buffer is (an instance name's tensor)."""
    return buffer.split("@", 1)[0]


def trace(kernel: Kernel) -> Trace:
    tracer = _Tracer(kernel)
    tracer.run(kernel.body, kernel.scalar_env(), "body")
    tracer.flush()
    return Trace(calls=tracer.calls)
