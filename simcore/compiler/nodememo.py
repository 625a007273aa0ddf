"""Op nodes that repeat inside a root call: build one, share its arrays with the others.

A Python ``for`` unrolls into one root call whose iterations trace the same ops on
operands of the same shapes; only where their views sit in GM differs.  An elementwise
builder reads nothing of an operand but its shape and dtype (and which operands are the
same value, ``x + x``), so every such op of one shape gives a node equal field for field
but for its index, op and inputs.  ``NodeMemo.build`` builds the first in full and gives
the later ones a copy sharing its arrays, which nothing changes after building (a node's
``extra`` is its own: the tiler writes there).

Nodes of one template are known by its number (``shape_id``): the group cache keys on
it instead of every field's bytes, and measures of a node's tiles are shared by identity.
"""
from __future__ import annotations

from . import ops
from .ops import Node
from .trace import attr_items

# builders that read of an input only its shape and dtype
_BY_SHAPE = (ops.elementwise,)


class NodeMemo:
    def __init__(self):
        self._templates: dict = {}            # key: (template number, pristine node)
        self.shape_id: dict[int, int] = {}    # node index: its template's number

    def build(self, builder, index: int, op, inputs: list, limits) -> Node:
        key = _key(builder, op, inputs)
        try:
            entry = self._templates.get(key) if key is not None else None
        except TypeError:       # an unhashable attribute: build it in full
            key = entry = None
        if entry is None:
            node = builder(index, op, inputs, limits)
            if key is not None:
                entry = self._templates[key] = (len(self._templates), _copy(node, index, op,
                                                                            inputs))
                self.shape_id[index] = entry[0]
            return node
        number, template = entry
        self.shape_id[index] = number
        return _copy(template, index, op, inputs)


def _copy(node: Node, index: int, op, inputs: list) -> Node:
    # the fields set directly: Node has no __post_init__, and dataclasses.replace's
    # checks cost more than the rest of a copy
    new = object.__new__(Node)
    new.__dict__.update(node.__dict__)
    new.index, new.op, new.inputs, new.extra = index, op, inputs, dict(node.extra)
    new.in_lo, new.in_hi = list(node.in_lo), list(node.in_hi)
    return new


def _key(builder, op, inputs: list):
    """What the builder reads, or None when it may read more."""
    if builder not in _BY_SHAPE:
        return None
    # which inputs are the same value: the builder counts such an input's UB once
    same = (0,) if len(inputs) == 1 else \
        tuple(next(j for j, w in enumerate(inputs) if w is v or w == v) for v in inputs)
    attrs = attr_items(op.attrs)
    return (builder.__name__, op.op, op.vec_tile, op.cube_tile, attrs,
            tuple((type(v).__name__, v.shape, v.dtype) for v in inputs), same)
