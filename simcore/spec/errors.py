"""One error type for every bad input, worded for the person who wrote the file."""
from __future__ import annotations


class ConfigError(Exception):
    """A config file (or a ``--set`` override) that cannot be used.

    The message is one paragraph: the file, the field path, the bad value, what is
    allowed, and what to do.  The CLI prints it and exits with code 2.
    """

    def __init__(self, message: str, *, source: str | None = None):
        self.message, self.source = message, source
        super().__init__(f"{source}: {message}" if source else message)

    def located(self, source: str) -> "ConfigError":
        """The same error, naming the file it came from (if it does not yet)."""
        if self.source is None:
            self.source, self.args = source, (f"{source}: {self.message}",)
        return self


class OoOError(ConfigError):
    """A tile that does not fit its on-chip buffer, worded like PyPTO's OoO report."""

    def __init__(self, *, op: str, tile: list[int], buffer: str, need: int, capacity: int,
                 source: str | None = None):
        self.op, self.tile, self.buffer = op, tile, buffer
        self.need, self.capacity = need, capacity
        ConfigError.__init__(self, 
            f"OoO (out of on-chip memory): op '{op}' with tile {tile} needs {need} bytes "
            f"of {buffer} but {buffer} holds {capacity} bytes. Choose a smaller TileShape "
            f"for this op (set_vec_tile_shapes / set_cube_tile_shapes) so its live inputs "
            f"and outputs fit {buffer}.",
            source=source,
        )
