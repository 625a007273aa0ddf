"""Data embedded in a report's <script> blocks: compact, deterministic, unbreakable.

Everything a page embeds goes through here so that no kernel name or label can end
the script element early: ``<``, ``>`` and ``&`` become JSON unicode escapes, which
``JSON.parse`` turns back into the same characters.
"""
from __future__ import annotations

import base64
import json

from markupsafe import Markup

_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
           "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(value) -> Markup:
    """JSON text safe inside <script type="application/json"> (sorted keys: byte-stable)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    for char, escaped in _UNSAFE.items():
        text = text.replace(char, escaped)
    return Markup(text)


def typed(values, dtype: str) -> dict:
    """A column as a little-endian typed array in base64: 100k floats cost 800 kB, not 2 MB."""
    import numpy as np      # here: the index and script_json need no numpy
    arr = np.ascontiguousarray(np.asarray(values, dtype=np.dtype(dtype).newbyteorder("<")))
    return {"t": np.dtype(dtype).name, "b64": base64.b64encode(arr.tobytes()).decode("ascii")}
