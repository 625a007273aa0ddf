"""Write files so that a failed run never leaves a half-written file that looks complete."""
from __future__ import annotations

import json
import os
import tempfile
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
def open_bytes(path: Path) -> Iterator[BinaryIO]:
    """``open_text`` for writers that make their bytes themselves (any bytes-like pieces;
    big ones go to the file without a copy)."""
    with _replaced(path) as fd:
        with os.fdopen(fd, "wb", buffering=1 << 20) as handle:
            yield handle


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
