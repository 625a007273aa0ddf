"""``ptolab import``: a PyPTO Python kernel -> a kernel config file."""
from __future__ import annotations

import shlex
from pathlib import Path

NAME = "import"
HELP = "trace a PyPTO Python kernel (FILE.py[:FUNCTION]) into a kernel config"


def add_arguments(p) -> None:
    p.add_argument("source", help="kernel file, optionally with :FUNCTION (the @pypto.jit "
                                  "kernel; OUTER.FUNCTION for one defined inside OUTER)")
    p.add_argument("--dim", dest="dims", action="append", default=[], metavar="NAME=VALUE",
                   help="value of a dynamic dim; the param of dim D of tensor argument T is T_D")
    p.add_argument("--arg", dest="args", action="append", default=[], metavar="NAME=VALUE",
                   help="a kernel argument: a tensor's shape ([64, 64] or fp16[64, 64]) or a "
                        "plain value (JSON)")
    p.add_argument("--arch", default=None, type=str.upper,
                   help="what pypto.platform.npuarch answers, for a kernel that branches on "
                        "the chip: DAV_2201 (Atlas A2/A3) or DAV_3510; the config keeps that "
                        "chip's branch (default: such a branch stops the import)")
    p.add_argument("--out", type=Path, default=None,
                   help="kernel config to write (default: FUNCTION.yaml in the current folder)")


def _split(source: str) -> tuple[Path, str | None]:
    path, sep, function = source.rpartition(":")
    if sep and path.endswith(".py") and all(p.isidentifier() for p in function.split(".")):
        return Path(path), function
    return Path(source), None


def run(args) -> int:
    from ..emit.atomic import write_text
    from ..frontend import kernel_text, parse_values, trace_file
    from ..frontend.standin import ARCHES
    from simcore.spec.errors import ConfigError
    if args.arch is not None and args.arch not in ARCHES:
        raise ConfigError(f"--arch {args.arch}: expected one of {', '.join(ARCHES)}, the chips "
                          f"of configs/hardware/.")
    path, function = _split(args.source)
    traced = trace_file(path, function, parse_values(args.dims, "--dim"),
                        parse_values(args.args, "--arg"), arch=args.arch)
    command = " ".join(["ptolab import", shlex.quote(args.source)]
                       + ([f"--arch {args.arch}"] if args.arch else [])
                       + [f"--dim {shlex.quote(d)}" for d in args.dims]
                       + [f"--arg {shlex.quote(a)}" for a in args.args])
    text = kernel_text(traced, command)
    out = args.out or Path(f"{traced.function}.yaml")
    write_text(out, text)
    R = traced.recorder
    print(f"wrote {out}: kernel {traced.function}, {len(R.decls)} tensors, "
          f"{sum(1 for _ in _ops(R.body))} ops, {len(R.params)} params")
    return 0


def _ops(body):
    from ..frontend.recorder import LoopRec, OpRec
    for stmt in body:
        if isinstance(stmt, OpRec):
            yield stmt
        elif isinstance(stmt, LoopRec):
            yield from _ops(stmt.body)
