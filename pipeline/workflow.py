"""The workflow's plan: which studies, stages and files, validated before any job runs.

The Snakefile asks this module what to build; all config checking happens here,
up front, so a bad study file stops the run before any job starts.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import shlex
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simcore.spec.errors import ConfigError
from simcore.spec.loader import validate
from simcore.spec.study import Study, Workflow, find_config, load_study

# The hardware and override modules (and the kernel model) are imported only when a study has
# to be validated: a plan remembered from an earlier run (load_plan's memo file) needs none.


@dataclass(frozen=True)
class StudyPlan:
    study: Study
    path: Path
    kernel_path: Path            # the kernel config the stages run (imported for a .py kernel)
    hardware_path: Path
    kernel_source: Path | None = None   # the PyPTO Python kernel it is imported from
    fit_path: Path | None = None        # the chip's fit overlay (hardware_path's), if any

    def stage_sets(self, stage: str) -> dict[str, Any]:
        return next(s.set for s in self.study.stages if s.name == stage)

    def import_args(self) -> str:
        """``ptolab import`` arguments for a Python kernel: SOURCE[:FUNCTION], dims, args."""
        _, function = self.study.python_kernel
        source = str(self.kernel_source) + (f":{function}" if function else "")
        words = [shlex.quote(source)]
        words += [f"--dim {shlex.quote(f'{k}={v}')}" for k, v in self.study.dims.items()]
        words += [f"--arg {shlex.quote(f'{k}={_arg_text(v)}')}"
                  for k, v in self.study.args.items()]
        return " ".join(words)


@dataclass(frozen=True)
class Plan:
    configs: Path
    results: str
    studies: dict[str, StudyPlan]

    def study(self, name: str) -> StudyPlan:
        return self.studies[name]

    def unknown_study_error(self, name: str) -> str:
        return (f"study '{name}' is not in this workflow; the studies it builds are those "
                f"configs/workflow.yaml lists under 'studies' and those configs/nightly.yaml "
                f"adds for `snakemake nightly` ({', '.join(self.studies)}). Add '{name}' to "
                f"the workflow file (its file goes in {self.configs}/studies/) and rerun.")

    def stage_key(self, study: str, stage: str) -> str:
        """Everything a stage's result depends on besides its input files.

        Snakemake compares this between runs (the 'params' rerun trigger), so
        editing one stage's knobs reruns that stage and nothing else upstream, and
        a change to ptolab's own model code reruns every stage.
        """
        sp = self.studies[study]
        return json.dumps({"kernel": str(sp.kernel_path), "hardware": str(sp.hardware_path),
                           "set": sp.stage_sets(stage), "rounds": sp.study.rounds,
                           "race": sp.study.race,
                           "code": code_version()}, sort_keys=True)

    def set_args(self, study: str, stage: str) -> str:
        sets = self.studies[study].stage_sets(stage)
        return " ".join(f"--set {shlex.quote(f'{k}={json.dumps(v)}')}" for k, v in sets.items())

    def reports(self) -> list[str]:
        return [f"{self.results}/{name}/report.html" for name in self.studies]

    def imported_kernels(self) -> dict[str, StudyPlan]:
        return {name: sp for name, sp in self.studies.items() if sp.kernel_source is not None}

    def stage_files(self, study: str, relative: str) -> list[str]:
        return [f"{self.results}/{study}/{stage.name}/{relative}"
                for stage in self.studies[study].study.stages]


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A digest of the model, emitter and parser sources: results are stale when these change."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted([*root.glob("simcore/**/*.py"), *root.glob("pipeline/emit/**/*.py"),
                        *root.glob("pipeline/parse/**/*.py"), *root.glob("pipeline/formats/**/*.py"),
                        *root.glob("pipeline/frontend/**/*.py"), root / "pipeline" / "runner.py"]):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


_ROOT = Path(__file__).resolve().parents[1]


def report_templates() -> list[Path]:
    """The report templates and the swimlane viewer (reports/): the report rules' inputs."""
    return sorted(p for p in (_ROOT / "reports").rglob("*") if p.is_file())


def report_asset_files() -> list[Path]:
    """What every report is rendered with besides its stages: the templates, the report
    code and the model's validation figures the reports quote (docs/fidelity.json)."""
    fidelity = _ROOT / "docs" / "fidelity.json"      # what the reports say of the model
    return report_templates() + sorted((_ROOT / "pipeline" / "report").glob("*.py")) + \
        ([fidelity] if fidelity.exists() else [])


def report_assets_hash() -> str:
    """The report rules' ``assets`` param: a changed template or report module reruns them."""
    return hashlib.sha256(b"".join(p.read_bytes() for p in report_asset_files())).hexdigest()


# The Snakefile plans twice as it starts (the default studies, then the nightly ones, mostly
# the same files): a study whose files are as they were is not read and validated again.
# With a memo file (the Snakefile's, in .snakemake/) this holds across runs too, so a knob
# edit validates the edited study only and a run whose configs are unchanged validates none.
_STUDY_MEMO: dict = {}


def _stamps(files: tuple) -> tuple:
    """(path, mtime, size) of every file a study's validation read (None: it was absent)."""
    out = []
    for p in files:
        try:
            st = Path(p).stat()
            out.append((str(p), st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(p), None, None))
    return tuple(out)


def _memo_version() -> str:
    """What a remembered validation is only valid for: the model code (its validators) and
    this file (how a study is checked)."""
    return code_version() + hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _read_memo(memo: Path) -> None:
    try:
        with open(memo, "rb") as f:
            version, entries = pickle.load(f)
    except Exception:       # missing, partial or from another ptolab: validate afresh
        return
    if version == _memo_version():
        for key, value in entries.items():
            _STUDY_MEMO.setdefault(key, value)


def _write_memo(memo: Path) -> None:
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f"{memo.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump((_memo_version(), dict(_STUDY_MEMO)), f)
        os.replace(tmp, memo)
    except OSError:         # a read-only folder only costs the next run a validation
        pass


def _overlay(hardware_path: Path) -> Path:
    from simcore.spec.hardware import fit_overlay
    return fit_overlay(hardware_path)


def _field(find, source: str, field: str) -> Path:
    """``find()``, its error naming the file and field that named the missing config."""
    try:
        return find()
    except ConfigError as exc:
        raise ConfigError(f"field '{field}': {exc.message} Fix the name or add the file.",
                          source=source) from None


def load_plan(configs: Path, config: dict, memo: Path | None = None) -> Plan:
    """The validated plan.  ``memo``: a file remembering validated studies between runs."""
    configs = Path(configs)
    if memo is not None:
        _read_memo(memo)
    validated = False
    workflow = validate(Workflow, dict(config), str(configs / "workflow.yaml"), "workflow")
    studies = {}
    hardware_checked: dict[Path, bool] = {}   # hardware file: it has a [race] table
    for name in workflow.studies:
        path = _field(lambda: find_config(configs / "studies", name, "study"),
                      str(configs / "workflow.yaml"), "studies")
        memo_key = (str(configs.resolve()), name, str(path))
        known = _STUDY_MEMO.get(memo_key)
        if known is not None and known[1] == _stamps(known[0]):
            studies[name] = known[2]
            continue
        validated = True
        study = load_study(path)
        if study.name != name:
            raise ConfigError(f"field 'name' is '{study.name}' but the file is listed as "
                              f"'{name}' in workflow.yaml; make them the same.", source=str(path))
        hardware_path = _field(lambda: find_config(configs / "hardware", study.hardware,
                                                   "hardware"), str(path), "hardware")
        if hardware_path not in hardware_checked:     # most studies share one chip
            from simcore.spec.hardware import load_hardware
            hardware_checked[hardware_path] = load_hardware(hardware_path).race is not None
        if study.race and not hardware_checked[hardware_path]:
            raise ConfigError(f"field 'race': the study races its stages, but its hardware "
                              f"file {hardware_path} has no [race] table (the costs to scale "
                              f"and the factors); add one (see configs/hardware/dav_2201.toml) "
                              f"or drop 'race'.", source=str(path))
        overlay = _overlay(hardware_path)
        fit_path = overlay if overlay.exists() else None
        if study.python_kernel is None:
            kernel_path = _field(lambda: find_config(configs / "kernels", study.kernel,
                                                     "kernel"), str(path), "kernel")
            _check_stages(study, path, kernel_path, _read_config(kernel_path))
            studies[name] = StudyPlan(study, path, kernel_path, hardware_path,
                                      fit_path=fit_path)
            files = (path, hardware_path, overlay, kernel_path)
            _STUDY_MEMO[memo_key] = (files, _stamps(files), studies[name])
        else:
            source = _python_source(configs, study, path)
            kernel_path = Path(workflow.results) / name / "kernel.yaml"
            _check_stages(study, path, source, _imported(study, source))
            studies[name] = StudyPlan(study, path, kernel_path, hardware_path, source,
                                      fit_path=fit_path)
    if memo is not None and validated:
        _write_memo(memo)
    return Plan(configs, workflow.results, studies)


def drop_rescheduling_timers() -> int:
    """Cancel Snakemake's pending scheduler re-evaluation timers; return how many.

    Its job rate limit (--max-jobs-per-timespan, 100 jobs per 1 s by default) starts a 1-s
    ``threading.Timer`` each time the scheduler waits (snakemake/scheduling/job_scheduler.py,
    ``_schedule_reevalutation``).  The last one is a non-daemon thread, so the process lived
    a second past the last job.  The Snakefile calls this once the workflow has ended, when
    there is nothing left to schedule.
    """
    dropped = 0
    for thread in threading.enumerate():
        if (isinstance(thread, threading.Timer)
                and "_schedule_reevalutation" in getattr(thread.function, "__qualname__", "")):
            thread.cancel()
            dropped += 1
    return dropped


def _arg_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _python_source(configs: Path, study: Study, path: Path) -> Path:
    file, _ = study.python_kernel
    source = Path(file) if Path(file).is_absolute() else configs / file
    if not source.is_file():
        raise ConfigError(f"field 'kernel': Python kernel '{source}' does not exist; give "
                          f"FILE.py[:FUNCTION] relative to {configs}.", source=str(path))
    return source


def _read_config(kernel_path: Path) -> dict:
    from simcore.spec.loader import read_mapping
    return read_mapping(kernel_path)


def _imported(study: Study, source: Path) -> dict:
    """The config ``ptolab import`` would write, traced now so a bad kernel or stage stops
    the run before any job starts."""
    import yaml

    from .frontend import kernel_text, parse_values, trace_file
    from .frontend.standin import ARCHES
    _, function = study.python_kernel
    # a kernel branching on pypto.platform.npuarch keeps the branch of the study's chip
    arch = Path(study.hardware).stem.upper()
    dims = parse_values([f"{k}={v}" for k, v in study.dims.items()], "dims")
    args = parse_values([f"{k}={_arg_text(v)}" for k, v in study.args.items()], "args")
    try:
        return yaml.safe_load(kernel_text(trace_file(source, function, dims, args,
                                                     arch=arch if arch in ARCHES else None),
                                          "plan"))
    except ConfigError as exc:
        raise exc.located(str(source)) from None


def _check_stages(study: Study, path: Path, kernel_path: Path, raw: dict) -> None:
    """Validate every stage's kernel + overrides now, naming the stage on failure."""
    from simcore.spec.kernel import Kernel
    from simcore.spec.overrides import apply

    for i, stage in enumerate(study.stages):
        source = f"{kernel_path} with this stage's set ({', '.join(stage.set)})" \
            if stage.set else str(kernel_path)
        try:
            validate(Kernel, apply(raw, stage.set), source, "kernel")
        except ConfigError as exc:
            raise ConfigError(f"stage 'stages[{i}]' ({stage.name}) does not give a valid "
                              f"kernel: {exc}", source=str(path)) from None
