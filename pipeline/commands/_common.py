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


def add_race_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--race", action="store_true",
                   help="also run the chip's race variants (the hardware file's [race] "
                        "costs scaled by each factor) and report the median and range of "
                        "kernel_us and e2e_us: which schedule AICPU owns which chain of "
                        "dependent tasks is a race, and one run is one draw of it")


def race_line(m: dict) -> str:
    """One line for a raced run's metrics: each time's median and range over the race."""
    parts = [f"{k}: median {m[f'{k}_race_median']:.2f}, race {m[f'{k}_race_min']:.2f}-"
             f"{m[f'{k}_race_max']:.2f}" for k in ("kernel_us", "e2e_us")]
    return f"over {m['race_runs']} race variants: " + "; ".join(parts)
