"""Whole ``ptolab simulate`` of the 10^6-leaf-task kernel, as a user runs it.

    python benchmarks/simulate_1m.py [--calls 1000] [--repeat 1] [--keep DIR] [--repo DIR]

Runs, each in a fresh process (imports, compile, simulate, every file written):

* ``ptolab simulate configs/kernels/bench_1m.yaml``
* the same with ``DUMP_DEVICE_PERF=true`` and ``--set debug_options.runtime_debug_mode=1``

and prints per command its wall, user and system seconds, the child's peak RSS and the
bytes of the files it wrote (best wall of ``--repeat`` runs; the figures of that run).
Wall well above user + sys means waiting (I/O, or other work on the machine).
``--calls`` scales the kernel (1000 leaf tasks per root call).  With ``--keep DIR``
the run folders stay there and their files' SHA-256 are printed, to check that a
change leaves the output byte-identical.  ``--repo DIR`` runs another checkout's code
(e.g. ``git worktree add /tmp/before <commit>``, with its compiled engine built or copied
in) on the same machine, for before/after figures taken side by side.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KERNEL = REPO / "configs" / "kernels" / "bench_1m.yaml"
COMMANDS = {
    "simulate": ([], {}),
    "simulate, runtime_debug_mode=1 + DUMP_DEVICE_PERF":
        (["--set", "debug_options.runtime_debug_mode=1"], {"DUMP_DEVICE_PERF": "true"}),
}


def ptolab(repo: Path) -> list[str]:
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(repo)!r}); "
                                  "from pipeline.cli import main; sys.exit(main())"]


def run_once(repo: Path, args: list[str], env: dict, out: Path) -> dict:
    """One command in a child process: its times from wait4, its peak RSS."""
    t0 = time.perf_counter()
    kernel = repo / KERNEL.relative_to(REPO)
    proc = subprocess.Popen(ptolab(repo) + ["simulate", str(kernel), *args, "--out", str(out)],
                            env={**os.environ, **env}, cwd=repo,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"ptolab simulate {' '.join(args)} failed:\n{err}")
    files = [p for p in out.iterdir() if p.is_file()]
    return {"wall": wall, "user": usage.ru_utime, "sys": usage.ru_stime,
            "rss_mb": usage.ru_maxrss / 1024,
            "files_mb": sum(p.stat().st_size for p in files) / 1e6}


def digests(folder: Path) -> list[str]:
    lines = []
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 24), b""):
                    h.update(block)
            lines.append(f"{h.hexdigest()}  {p.relative_to(folder)}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=1000, help="root calls (default 1000: 10^6)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per command, best wall kept")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run folders here")
    ap.add_argument("--repo", type=Path, default=REPO, help="checkout whose code runs")
    a = ap.parse_args()
    calls = ["--set", f"params.CALLS={a.calls}"] if a.calls != 1000 else []
    scratch = Path(tempfile.mkdtemp(prefix="ptolab_sim1m_"))
    rows = []
    try:
        for k, (name, (args, env)) in enumerate(COMMANDS.items()):
            best = None
            for _ in range(a.repeat):
                out = (a.keep or scratch) / f"run{k}"
                r = run_once(a.repo.resolve(), calls + args, env, out)
                if best is None or r["wall"] < best["wall"]:
                    best = r
                if a.keep is None:
                    shutil.rmtree(out, ignore_errors=True)
            rows.append((name, best))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"bench_1m, {a.calls * 1000:,} leaf tasks, code of {a.repo} ({os.cpu_count()} "
          f"cores, load {os.getloadavg()[0]:.2f})\n")
    print("| command | wall s | user s | sys s | peak RSS MB | files MB |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['wall']:.1f} | {r['user']:.1f} | {r['sys']:.1f} | "
              f"{r['rss_mb']:.0f} | {r['files_mb']:.0f} |")
    if a.keep is not None:
        for k in range(len(COMMANDS)):
            print(f"\nrun{k}:")
            print("\n".join(digests(a.keep / f"run{k}")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
