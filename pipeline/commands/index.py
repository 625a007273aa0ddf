from contextlib import contextmanager
from pathlib import Path

NAME = "index"
HELP = "results/index.html linking every study report"


def add_arguments(p) -> None:
    p.add_argument("results", type=Path)
    p.add_argument("studies", nargs="+", type=Path,
                   help="study config files, in the order the index lists them")
    p.add_argument("--out", type=Path, required=True)


def refresh(results: Path, studies: list[Path], out: Path, if_present: bool = False) -> bool:
    """Render the index while holding a lock on its folder; return whether it was written.

    Report jobs refresh the index too (``ptolab report --index``, ``if_present``: an index
    not written yet is the index job's to write) and may run side by side with each other and
    with the index job.  Each renders after its own report is written and one at a time, so
    the last render sees every report written before it.
    """
    from ..report.render import render_index
    out.parent.mkdir(parents=True, exist_ok=True)
    with _lock(out.parent):
        if if_present and not out.exists():
            return False
        render_index(results, studies, out)
        return True


@contextmanager
def _lock(folder: Path):
    """An exclusive lock on ``folder`` itself, so no lock file is left among the results;
    where the file system cannot lock a folder (NFS locks need a file open for writing),
    on a hidden file in it."""
    import fcntl
    import os
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        fd = os.open(folder / ".index.lock", os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        os.close(fd)      # releases the lock


def run(args) -> int:
    refresh(args.results, args.studies, args.out)
    return 0
