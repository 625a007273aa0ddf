"""Arguments shared by the commands that take a kernel."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_kernel_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernel", type=Path, help="kernel config file (.toml or .yaml)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override an option, param or tile shape; value is JSON "
                        "(e.g. runtime_options.stitch_function_max_num=64)")
    p.add_argument("--hardware", default="dav_2201",
                   help="hardware name in configs/hardware or a path (default dav_2201)")
