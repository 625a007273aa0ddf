"""Output folders that a run owns: built aside, swapped in whole, locked while written.

A command that writes a folder of files (``simulate``, ``parse``, ``stage``)
writes them into a fresh hidden folder beside the target and, only when every
file is written, moves the previous folder out of the way and the new one in.
So a folder never mixes two runs (a rerun with fewer switches leaves no old
swimlane behind), and a run killed half-way leaves the previous folder intact or
no folder at all, never one that looks complete and is not.  A lock file beside
the target keeps two runs from writing the same folder at once; it is removed
when the run ends.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from simcore.spec.errors import ConfigError

MARKER = ".ptolab_run.json"     # what wrote the folder; a folder without it is not ours
_PARTIAL, _OLD, _LOCK = ".partial-", ".old-", ".lock"


@contextmanager
def owned_folder(target: Path, command: str, *, adopt: bool = False) -> Iterator[Path]:
    """Yield a fresh folder to write into; on success it becomes ``target``.

    An existing ``target`` is replaced only if it is empty or was written by
    ptolab (it holds the marker); ``adopt`` lets the workflow replace any folder
    under its results tree.  On any error the new files are removed and the
    previous folder stays as it was.
    """
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise ConfigError("is a file, not a folder. Give --out a folder path (it is created "
                          "if missing), or move the file away.", source=str(target))
    here = Path.cwd().resolve()
    if target.resolve() == here or target.resolve() in here.parents:
        raise ConfigError("is the current folder or holds it; ptolab replaces its output "
                          "folder as a whole. Give --out a new folder.", source=str(target))
    parent = target.absolute().parent
    parent.mkdir(parents=True, exist_ok=True)
    with _locked(parent / f".{target.name}{_LOCK}", target):
        if not adopt:
            _check_replaceable(target)
        _remove_leftovers(parent, target.name)
        fresh = Path(tempfile.mkdtemp(prefix=f".{target.name}{_PARTIAL}", dir=parent))
        try:
            yield fresh
            (fresh / MARKER).write_text(json.dumps({"command": command}) + "\n",
                                        encoding="utf-8")
            os.chmod(fresh, 0o777 & ~_umask())   # mkdtemp makes 0700; outputs are for everyone
            _swap_in(fresh, target)
        except BaseException:
            shutil.rmtree(fresh, ignore_errors=True)
            raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def _locked(lock_path: Path, target: Path) -> Iterator[None]:
    """An exclusive lock file, removed again when the run ends.

    A run that opened the file just before its holder removed it would lock a file
    nobody else sees: after locking, the path must still name the locked file.
    """
    try:
        handle = open(lock_path, "a+")
    except OSError as exc:
        # the lock file is ours, the folder is the user's: name the folder asked for
        raise OSError(exc.errno, f"cannot write in {lock_path.parent} ({exc.strerror})",
                      str(target)) from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.stat(lock_path).st_ino != os.fstat(handle.fileno()).st_ino:
                raise BlockingIOError
        except (BlockingIOError, FileNotFoundError):
            raise FolderBusy(f"another ptolab run is writing this folder right now (it holds "
                             f"{lock_path}). Wait for it to finish, or choose another --out.",
                             source=str(target)) from None
        try:
            yield
        finally:
            lock_path.unlink(missing_ok=True)


class FolderBusy(ConfigError):
    """Another live run holds the folder's lock."""


def drop_folder(target: Path) -> None:
    """Remove ``target`` (and any leftovers of killed runs beside it) under its lock; leave
    it alone while another run holds the lock, for that run is about to replace it."""
    target = Path(target)
    parent = target.absolute().parent
    if not parent.is_dir():
        return
    try:
        with _locked(parent / f".{target.name}{_LOCK}", target):
            shutil.rmtree(target, ignore_errors=True)
            _remove_leftovers(parent, target.name)
    except (FolderBusy, OSError):
        pass


def _check_replaceable(target: Path) -> None:
    if not target.exists() or (target / MARKER).exists() or not any(target.iterdir()):
        return
    raise ConfigError("is a folder that ptolab did not write, and it is not empty; ptolab "
                      "replaces its output folder as a whole, so it will not write into "
                      "this one. Choose a new or empty --out folder, or one an earlier "
                      "ptolab run wrote.", source=str(target))


def _remove_leftovers(parent: Path, name: str) -> None:
    """Folders of a run that was killed (SIGKILL, power loss) before its swap.

    Only called under the lock, so no live run is writing them.
    """
    for prefix in (f".{name}{_PARTIAL}", f".{name}{_OLD}"):
        for stale in parent.glob(prefix + "*"):
            shutil.rmtree(stale, ignore_errors=True)


def _swap_in(fresh: Path, target: Path) -> None:
    """Between the two renames the target is missing, never half old and half new."""
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}{_OLD}", dir=fresh.parent))
        os.replace(target, old / "previous")
    os.replace(fresh, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
