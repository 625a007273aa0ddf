"""``ptolab``: the command line.

Subcommands live one per module in ``pipeline.commands``; a command module
imports what it needs inside ``run()``, so building the parser stays cheap.
Every failure ends as one line or paragraph on stderr, never a traceback:

====  =========================================================================
code  meaning
====  =========================================================================
0     done
1     ``ptolab nightly``: a regression was found; ``ptolab calibrate``: the fit
      ended on a bound (nothing written); ``ptolab validate``: a check failed
2     bad input (config, override, argument, unreadable or inconsistent file),
      or a size the model refuses; nothing was written
3     the system failed the run: disk full, read-only or missing folder,
      permission denied, out of memory; nothing half-written was kept
130   interrupted (Ctrl-C); nothing half-written was kept
====  =========================================================================
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from simcore.spec.errors import ConfigError

from . import commands

EXIT_BAD_INPUT, EXIT_SYSTEM, EXIT_INTERRUPTED = 2, 3, 130


def _command_modules():
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            yield importlib.import_module(f"{commands.__name__}.{info.name}")


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(
        prog="ptolab", description="PyPTO tuning lab: compile, simulate, parse and report.",
        epilog="exit codes: 0 done, 1 nightly regression / calibrate fit on a bound / validate "
               "check failed, 2 bad input, 3 system failure "
               "(disk full, read-only, out of memory), 130 interrupted")
    sub = parser.add_subparsers(dest="command", required=True)
    runners = {}
    for module in _command_modules():
        module.add_arguments(sub.add_parser(module.NAME, help=module.HELP))
        runners[module.NAME] = module.run
    return parser, runners


def _fail(message: str, code: int) -> int:
    print(f"ptolab: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    parser, runners = build_parser()
    args = parser.parse_args(argv)
    try:
        return runners[args.command](args)
    except ConfigError as exc:
        return _fail(f"error: {exc}", EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        return _fail("interrupted; no partial output was kept.", EXIT_INTERRUPTED)
    except MemoryError:
        return _fail("error: out of memory. Use smaller params (the compiler estimates the "
                     "task count first, but a run can still outgrow this machine).",
                     EXIT_SYSTEM)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        return _fail(f"error: {where}{exc.strerror or exc}. Check that the output folder "
                     f"exists, is writable and has free space; no partial output was kept.",
                     EXIT_SYSTEM)


if __name__ == "__main__":
    sys.exit(main())
