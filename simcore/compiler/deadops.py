"""Drop the ops whose results reach nothing that outlives their root function.

Upstream's tile-graph passes end with a dead-operation sweep (``DeadOperationEliminator``
in ``framework/src/passes/pass_utils/dead_operation_eliminate.cpp``, run by
RemoveRedundantOp, which the default pass strategy includes, at 08cec41e4 and 883e7dfb):
within one root function, an op survives only if it produces a tensor the function
hands out (an outcast) or feeds, through any chain of ops, one that does.  A leftover
``unused = pypto.exp(x)`` therefore costs nothing on the chip, and must cost nothing here.

What a root function hands out, in terms of a traced kernel:

- every tensor the kernel file declares in ``tensors`` (an argument, or a ``pypto.tensor``
  made outside any loop): writes to declared memory stay.  Upstream would also drop the
  writes of top-level code into a ``pypto.tensor`` nothing reads; here a declared tensor
  is kept, since a hand-written kernel file often leaves its result's role at the default
  (temporary);
- a ``fresh_per`` tensor (one made inside a loop body) that another call reads: what an
  iteration leaves for the code after the loop.

An op's result that is no declared tensor never leaves its call (the kernel language has
values cross root calls only through tensors), so it lives only if something live reads it.

The decision is per root function, as upstream compiles each function once: an op
statement is kept in every call of its function when it is live in any of them.  Names,
not single bindings, carry liveness: a name bound twice keeps both writers while either
is read (``t = exp(x); t = x + x`` stores the second and keeps the first), which upstream,
whose tensors are single values, would drop; it is never the other way round.
"""
from __future__ import annotations

from collections import defaultdict

from ..spec.errors import ConfigError
from ..spec.kernel import Kernel
from .trace import RootCall, Trace, tensor_of

# ops whose result is another name for (part of) their input's bytes: a write through the
# result is a write of the input (an assemble into an inplace reshape of an output)
_ALIASING = ("reshape", "view")
# ops that write part of a named tensor: what it held before is still there after
_PARTIAL_WRITES = ("assemble", "scatter_update")


def drop_dead_ops(traced: Trace, kernel: Kernel) -> tuple[Trace, list[str]]:
    """The trace without its dead ops, and the field path of each statement dropped
    (in first-traced order)."""
    live_where = _live_by_function(traced, kernel)
    dropped: dict[str, None] = {}
    calls = []
    for call in traced.calls:
        live = live_where[call.root_key]
        ops = [op for op in call.ops if op.where in live]
        if len(ops) == len(call.ops):
            calls.append(call)
            continue
        for op in call.ops:
            if op.where not in live:
                dropped.setdefault(op.where)
        if ops:
            calls.append(_with_ops(call, ops))
    if not dropped:
        return traced, []
    if not calls:
        raise ConfigError(
            f"no op of kernel '{kernel.name}' reaches a tensor that outlives its loop "
            f"iteration (one of 'tensors' without fresh_per), so nothing would run "
            f"(upstream's dead-operation sweep removes every op whose result reaches no "
            f"output): assemble the result into a tensor of 'tensors' with role: output.")
    return Trace(calls=calls), list(dropped)


def _live_by_function(traced: Trace, kernel: Kernel) -> dict[str, set[str]]:
    """Per root function, the field paths of its live op statements."""
    read_in = defaultdict(set)            # buffer -> calls that read it
    for c, call in enumerate(traced.calls):
        for op in call.ops:
            for name in op.inputs:
                read_in[name].add(c)
    live_where: dict[str, set[str]] = defaultdict(set)
    # the usual call: a dead chain ends in a result nothing after it reads, and none does
    slow = []
    for c, call in enumerate(traced.calls):
        if _has_unread_result(call, c, kernel, read_in):
            slow.append(c)
        else:
            live_where[call.root_key].update(op.where for op in call.ops)
    # a statement kept for one call of its function is kept in all, so it keeps its
    # producers there too (calls of one function may hold different ops under a cond):
    # until nothing more is kept
    grown = True
    while grown:
        grown = False
        for c in slow:
            call = traced.calls[c]
            kept = live_where[call.root_key]
            got = _live_statements(call, c, kernel, read_in, kept)
            if not got <= kept:
                kept |= got
                grown = True
    return live_where


def _live_statements(call: RootCall, c: int, kernel: Kernel, read_in,
                     kept: set[str]) -> set[str]:
    """The field paths of ``call``'s ops that reach something the call hands out, or that
    feed a statement ``kept`` for the function already."""
    alias = _Aliases()
    for op in call.ops:
        if op.op in _ALIASING and op.inputs and (op.op == "view" or op.get("inplace")):
            alias.join(op.out, op.inputs[0])
    writers = defaultdict(list)           # alias class -> its writers
    for i, op in enumerate(call.ops):
        writers[alias.find(op.out)].append(i)
    # a handed-out name may be written only through an alias (an assemble into an inplace
    # reshape of an output), so every name the call mentions is asked, inputs too
    names = {name for op in call.ops for name in (*op.inputs, op.out)}
    needed = {alias.find(name) for name in names
              if _handed_out(name, c, kernel, read_in)}
    live = [op.where in kept for op in call.ops]
    for op, keep in zip(call.ops, live):
        if keep:
            needed.update(alias.find(name) for name in op.inputs)
    work = list(needed)
    while work:
        for i in writers.get(work.pop(), ()):
            if live[i]:
                continue
            live[i] = True
            for name in call.ops[i].inputs:
                cls = alias.find(name)
                if cls not in needed:
                    needed.add(cls)
                    work.append(cls)
    return {op.where for op, keep in zip(call.ops, live) if keep}


def _has_unread_result(call: RootCall, c: int, kernel: Kernel, read_in) -> bool:
    """Whether some op's result is neither read by a later op (before the name is bound
    again) nor handed out."""
    later: set[str] = set()                 # names read after the op being looked at
    for op in reversed(call.ops):
        if op.out not in later and not _handed_out(op.out, c, kernel, read_in):
            return True
        if op.op not in _PARTIAL_WRITES:
            later.discard(op.out)
        later.update(op.inputs)
    return False


def _handed_out(buffer: str, c: int, kernel: Kernel, read_in) -> bool:
    spec = kernel.tensors.get(tensor_of(buffer))
    if spec is None:
        return False          # an op's result: the kernel language keeps it inside its call
    if spec.fresh_per is None:
        return True
    return bool(read_in.get(buffer, set()) - {c})


class _Aliases:
    """Union-find over buffer names."""

    def __init__(self):
        self.parent: dict[str, str] = {}

    def find(self, name: str) -> str:
        root = name
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while name != root:
            self.parent[name], name = root, self.parent.get(name, root)
        return root

    def join(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb


def _with_ops(call: RootCall, ops) -> RootCall:
    kept = {name for op in ops for name in (*op.inputs, op.out)}
    # the counts go on as they were, so an instance named after this is numbered past every
    # earlier one, dropped or kept
    return RootCall(root_key=call.root_key, ops=ops, bodies=call.bodies,
                    parallel=call.parallel,
                    instances={k: v for k, v in call.instances.items() if k in kept},
                    instance_counts=dict(call.instance_counts))
