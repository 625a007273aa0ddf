"""Trace a kernel's body into root calls of concrete ops.

This is what running the Python of a PyPTO kernel does at compile time: params
and loop indices become numbers, a Python ``for`` unrolls in place, and every
iteration of a ``pypto.loop`` becomes one call of that loop's root function.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..spec.errors import ConfigError
from ..spec.expr import ExprError, evaluate
from ..spec.kernel import Kernel, LoopStmt, OpStmt, TileStmt


@dataclass(frozen=True)
class TracedOp:
    op: str
    inputs: tuple[str, ...]
    out: str
    where: str                      # field path in the kernel file, for errors
    vec_tile: tuple[int, ...] | None
    scalar: float | None = None
    dtype: str | None = None
    shape: tuple[int, ...] | None = None
    offsets: tuple[int, ...] | None = None
    label: str = ""


@dataclass
class RootCall:
    root_key: str                   # identifies the root function
    ops: list[TracedOp] = field(default_factory=list)


@dataclass
class Trace:
    calls: list[RootCall]
    loop_bodies: int


class _Tracer:
    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.calls: list[RootCall] = []
        self.current = RootCall(root_key=f"{kernel.name}_main")
        self.vec_tile: tuple[int, ...] | None = None
        self.segment = 0
        self.loop_bodies = 0

    def _value(self, text, env, where: str) -> int:
        try:
            return evaluate(text, env)
        except ExprError as exc:
            raise ConfigError(f"field '{where}': {exc}.") from None

    def _dims(self, dims, env, where: str) -> tuple[int, ...]:
        return tuple(self._value(d, env, f"{where}[{i}]") for i, d in enumerate(dims))

    def flush(self) -> None:
        if self.current.ops:
            self.calls.append(self.current)
            self.loop_bodies += 1
        self.segment += 1
        self.current = RootCall(root_key=f"{self.kernel.name}_main{self.segment}")

    def run(self, body, env: dict[str, int], where: str) -> None:
        for i, stmt in enumerate(body):
            here = f"{where}[{i}]"
            if isinstance(stmt, TileStmt):
                ref = stmt.set_vec_tile_shapes
                dims = self.kernel.tiles[ref] if isinstance(ref, str) else ref
                self.vec_tile = self._dims(dims, env, f"{here}.set_vec_tile_shapes")
                if any(d <= 0 for d in self.vec_tile):
                    raise ConfigError(f"field '{here}.set_vec_tile_shapes': every tile dim "
                                      f"must be > 0, got {list(self.vec_tile)}.")
            elif isinstance(stmt, OpStmt):
                self.current.ops.append(self._op(stmt, env, here))
            else:
                self._loop(stmt, env, here)

    def _op(self, stmt: OpStmt, env, where: str) -> TracedOp:
        return TracedOp(
            op=stmt.op, inputs=tuple(stmt.inputs), out=stmt.out, where=where,
            vec_tile=self.vec_tile, scalar=stmt.scalar, dtype=stmt.dtype,
            shape=self._dims(stmt.shape, env, f"{where}.shape") if stmt.shape else None,
            offsets=self._dims(stmt.offsets, env, f"{where}.offsets") if stmt.offsets else None,
            label=stmt.label or "")

    def _loop(self, stmt: LoopStmt, env, where: str) -> None:
        head = stmt.loop
        trip = self._value(head.trip, env, f"{where}.loop.trip")
        if trip < 0:
            raise ConfigError(f"field '{where}.loop.trip' evaluates to {trip}; a trip count "
                              f"must be >= 0.")
        if head.style == "for":
            for i in range(trip):
                self.run(stmt.body, {**env, head.idx: i}, f"{where}.body")
            return
        self.flush()   # ops before the loop form their own root call
        for i in range(trip):
            self.current = RootCall(root_key=head.name)
            self.run(stmt.body, {**env, head.idx: i}, f"{where}.body")
            self.flush()


def trace(kernel: Kernel) -> Trace:
    tracer = _Tracer(kernel)
    tracer.run(kernel.body, dict(kernel.params), "body")
    tracer.flush()
    return Trace(calls=tracer.calls, loop_bodies=tracer.loop_bodies)
