"""``ptolab``: the command line (DESIGN §3).

Subcommands live one per module in ``pipeline.commands``.  Every bad input ends
as one paragraph on stderr and exit code 2, never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from simcore.spec.errors import ConfigError

from . import commands


def _command_modules():
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            yield importlib.import_module(f"{commands.__name__}.{info.name}")


def build_parser() -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(
        prog="ptolab", description="PyPTO tuning lab: compile, simulate, parse and report.")
    sub = parser.add_subparsers(dest="command", required=True)
    runners = {}
    for module in _command_modules():
        module.add_arguments(sub.add_parser(module.NAME, help=module.HELP))
        runners[module.NAME] = module.run
    return parser, runners


def main(argv: list[str] | None = None) -> int:
    parser, runners = build_parser()
    args = parser.parse_args(argv)
    try:
        return runners[args.command](args)
    except ConfigError as exc:
        print(f"ptolab: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
