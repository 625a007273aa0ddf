"""Write files so that a failed run never leaves a half-written file that looks complete."""
from __future__ import annotations

import json
import os
import queue
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator, TextIO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary file beside the target, then rename it into place."""
    with _replaced(path) as fd, os.fdopen(fd, "wb") as handle:
        handle.write(data)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, data: Any, indent: int | None = 4) -> None:
    write_text(path, json.dumps(data, indent=indent, ensure_ascii=False) + "\n")


@contextmanager
def open_text(path: Path) -> Iterator[TextIO]:
    """A UTF-8 text handle on a temporary file beside ``path``, renamed into place when
    the block ends cleanly and removed otherwise: big files are written piece by piece
    without ever holding the whole text."""
    with _replaced(path) as fd:
        with os.fdopen(fd, "w", encoding="utf-8", newline="", buffering=1 << 20) as handle:
            yield handle


@contextmanager
def open_bytes(path: Path) -> Iterator[_Background]:
    """``open_text`` for writers that make their bytes themselves: a handle taking any
    bytes-like pieces, which a thread of its own writes, in order, while the writer makes
    the next ones (pieces must not change once handed over)."""
    with _replaced(path) as fd:
        with os.fdopen(fd, "wb", buffering=1 << 20) as handle:
            background = _Background(handle)
            try:
                yield background
            except BaseException:
                background.close(check=False)     # the block's error is the one to see
                raise
            background.close()


class _Background:
    """Writes pieces to a file in a thread, in order.  Copying a big file into the page
    cache is mostly the kernel's time (about 2 s of system time for the 1 GB of a 10^6
    task debug run on the 2-core development machine, where fresh page cache is slow to
    get); in a thread it overlaps the numpy work that makes the pieces, which releases
    the GIL too.  A failed write is raised by the next ``write`` or by ``close``."""

    def __init__(self, handle: BinaryIO, depth: int = 4):
        self._pieces: queue.Queue = queue.Queue(depth)    # bounds the memory held
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(handle,), daemon=True)
        self._thread.start()

    def write(self, piece) -> None:
        self._raise()
        self._pieces.put(piece)

    def writelines(self, pieces) -> None:
        for piece in pieces:
            self.write(piece)

    def close(self, check: bool = True) -> None:
        """Wait until every piece is written (``check``: raise a failed write's error)."""
        if self._thread.is_alive():
            self._pieces.put(None)
            self._thread.join()
        if check:
            self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self, handle: BinaryIO) -> None:
        while (piece := self._pieces.get()) is not None:
            if self._error is None:
                try:
                    handle.write(piece)
                except BaseException as error:    # noqa: B036 - handed to the caller
                    self._error = error


@contextmanager
def _replaced(path: Path) -> Iterator[int]:
    """A descriptor of a temporary file beside ``path``; the file replaces ``path`` when
    the block ends cleanly (the block closes the descriptor) and is removed otherwise."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        yield fd
        os.chmod(tmp, 0o666 & ~_umask())   # mkstemp makes 0600; outputs are for everyone
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
