"""``ptolab pmu-to-csv``: upstream ``tilefwk_pmu_to_csv.py`` on a PROF data folder.

The counters mean nothing without their event group and chip.  A device run
records neither, so the user names them (``-pe``, ``--arch``; default group 2 on
dav_2201, as upstream); a ptolab run notes both beside its records, and a
``-pe``/``--arch`` that contradicts that note is refused rather than written
into a mislabelled CSV.
"""
from pathlib import Path

NAME = "pmu-to-csv"
HELP = "PMU records of PROF_*/device_*/data -> tilefwk_prof_pmu.csv"


def add_arguments(p) -> None:
    # the allowed groups and chips are checked in run(): importing the PMU parser here
    # would load polars for every ptolab command
    p.add_argument("-p", "--path", dest="path", type=Path, required=True,
                   help="the msprof data folder, PROF_<id>/device_<n>/data")
    p.add_argument("-pe", "--pmu-event-type", dest="group", type=int, default=None,
                   help="the PYPTO_PROF_PMU_EVENT_TYPE of the run (default: what a ptolab run "
                        "noted, else 2)")
    p.add_argument("--arch", default=None,
                   help="the chip the run used, dav_2201 or dav_3510 (default: what a ptolab "
                        "run noted, else dav_2201)")
    p.add_argument("--output", type=Path, default=Path("."),
                   help="folder for tilefwk_prof_pmu.csv (default: the current folder)")


def setting(path: Path, group: int | None, arch: str | None) -> tuple[int, str]:
    """The group and chip to label the counters with, checked against the run's note."""
    from simcore.spec.errors import ConfigError

    from ..parse.pmu import ARCHES, GROUPS
    from ..parse.run import read_pmu_sidecar
    if group is not None and group not in GROUPS:
        raise ConfigError(f"-pe {group} is not a PMU event group; choose one of "
                          f"{', '.join(map(str, GROUPS))}.")
    if arch is not None and arch not in ARCHES:
        raise ConfigError(f"--arch {arch} is not a chip the PMU tables know; choose one of "
                          f"{', '.join(ARCHES)}.")
    noted = read_pmu_sidecar(path) if Path(path).is_dir() else None
    if noted is None:
        return (2 if group is None else group), (arch or "dav_2201")
    wrong = [f"{flag} {given} but the run recorded {real}"
             for flag, given, real in (("-pe", group, noted[0]), ("--arch", arch, noted[1]))
             if given is not None and given != real]
    if wrong:
        raise ConfigError(f"{'; '.join(wrong)} (in {Path(path).parents[1]}/ptolab_pmu.json). "
                          f"The counters would be labelled with the wrong events; drop the "
                          f"option or pass the recorded value.", source=str(path))
    return noted


def run(args) -> int:
    from simcore.spec.errors import ConfigError

    from ..emit.atomic import write_text
    from ..parse.pmu import CSV_NAME, csv_text, read_pmu
    group, arch = setting(args.path, args.group, args.arch)
    if args.output.exists() and not args.output.is_dir():
        raise ConfigError("is a file, not a folder; --output names the folder that gets "
                          f"{CSV_NAME}.", source=str(args.output))
    rows = read_pmu(args.path)
    target = args.output / CSV_NAME
    write_text(target, csv_text(rows, group, arch))
    print(f"{len(rows)} PMU entries (group {group}, {arch}) -> {target}")
    return 0
