"""``ptolab pmu-to-csv``: upstream ``tilefwk_pmu_to_csv.py`` on a PROF data folder."""
from pathlib import Path

NAME = "pmu-to-csv"
HELP = "PMU records of PROF_*/device_*/data -> tilefwk_prof_pmu.csv"


def add_arguments(p) -> None:
    from ..parse.pmu import ARCHES, GROUPS
    p.add_argument("-p", "--path", dest="path", type=Path, required=True,
                   help="the msprof data folder, PROF_<id>/device_<n>/data")
    p.add_argument("-pe", "--pmu-event-type", dest="group", type=int, default=2,
                   choices=GROUPS, help="the PYPTO_PROF_PMU_EVENT_TYPE of the run (default 2)")
    p.add_argument("--arch", choices=ARCHES, default="dav_2201",
                   help="the chip the run used (default dav_2201)")
    p.add_argument("--output", type=Path, default=Path("."),
                   help="folder for tilefwk_prof_pmu.csv (default: the current folder)")


def run(args) -> int:
    from ..emit.atomic import write_text
    from ..parse.pmu import CSV_NAME, csv_text, read_pmu
    rows = read_pmu(args.path)
    target = args.output / CSV_NAME
    write_text(target, csv_text(rows, args.group, args.arch))
    print(f"{len(rows)} PMU entries -> {target}")
    return 0
