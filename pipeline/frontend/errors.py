"""The one error of the tracing front end: a construct the kernel language cannot express.

It is a :class:`ConfigError`, so ``ptolab`` prints it as one paragraph and exits 2.  The
message names the kernel function, the file:line that used the construct, and what is
supported instead: an unsupported construct never becomes a silent no-op.
"""
from __future__ import annotations

from simcore.spec.errors import ConfigError


class Unsupported(ConfigError):
    def __init__(self, what: str, *, where: str = "", function: str = "",
                 supported: str | list[str] | tuple = "", hint: str = ""):
        self.what, self.where = what, where
        place = " ".join(p for p in (f"{function}()" if function else "",
                                     f"at {where}" if where else "") if p)
        message = f"{place + ': ' if place else ''}{what}"
        if supported:
            listed = supported if isinstance(supported, str) else ", ".join(supported)
            message += f". Supported: {listed}"
        if hint:
            message += f". {hint}"
        super().__init__(message.rstrip(".") + ".")
