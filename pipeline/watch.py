"""The fast knob-edit loop: rebuild what an edit changed, in one long-lived process.

Snakemake stays the workflow.  A watch starts by running it once for the watched studies,
so every result it starts from is what ``snakemake`` builds.  From then on it polls the
files a build reads; after an edit it plans again exactly as the Snakefile does
(``pipeline.workflow.load_plan``, the nightly studies added), works out which jobs'
inputs changed and runs those jobs' ``ptolab`` commands, with the arguments the rules give
them, in this process, whose imports are already paid.  A knob edit then costs its stage's
own work and its report's, not Snakemake's ~1.3 s start-up plus two processes' imports.
Afterwards ``snakemake --touch`` records the rebuilt outputs in the background, so a later
``snakemake`` finds them up to date rather than building them again.

A job's signature stands for what Snakemake compares before it reruns a job: the rule's
params and the content of its input files.  When ptolab's own code or the report templates
change under a running watch, the modules this process loaded are stale, so that round is
handed to ``snakemake`` whole (restart the watch to get the fast loop back).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import shlex
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from simcore.spec.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "Snakefile"
# what the loaded modules were built from: a change here makes this process stale
CODE_TREES = ("simcore", "pipeline", "reports")


@dataclass(frozen=True)
class Job:
    """One rule's job: the ``ptolab`` arguments its rule runs and what it depends on."""
    study: str
    name: str                    # "import", a stage name, "report" or "index"
    argv: tuple[str, ...]
    signature: str
    log: Path | None = None      # where the rule sends the command's output

    @property
    def key(self) -> tuple[str, str]:
        return (self.study, self.name)

    @property
    def label(self) -> str:
        return self.name if self.name == "index" else f"{self.study}/{self.name}"


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(json.dumps(part, sort_keys=True, default=str).encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def _content(path: Path | None) -> str:
    """A file's content hash ('' when absent): what makes a job's input differ."""
    if path is None:
        return ""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:20]
    except OSError:
        return ""


def code_digest() -> str:
    """ptolab's model code and report assets as they are on disk now."""
    from .workflow import code_version, report_assets_hash
    return code_version.__wrapped__() + report_assets_hash()[:16]


def build_plan(configs: Path, memo: Path | None = None):
    """The Snakefile's plan (the workflow file's studies, then the nightly-only ones) and
    the workflow file's study names, what a bare ``snakemake`` builds."""
    from simcore.spec.loader import read_mapping

    from .workflow import load_plan
    configs = Path(configs)
    plan = load_plan(configs, read_mapping(configs / "workflow.yaml"), memo=memo)
    default = list(plan.studies)
    nightly_file = configs / "nightly.yaml"
    if nightly_file.exists():
        from .nightly.config import load_nightly
        from .nightly.plan import nightly_plan, with_studies
        plan = with_studies(plan, nightly_plan(configs, plan.results, load_nightly(nightly_file)))
    return plan, default


def jobs(plan, studies: list[str]) -> list[Job]:
    """The jobs that build ``studies``' reports and the index, in an order that runs each
    after the jobs it reads from (as the rules in workflow/rules/ chain them)."""
    from .workflow import report_assets_hash
    results = Path(plan.results)
    index_studies = [str(sp.path) for sp in plan.studies.values()]
    assets = report_assets_hash()
    out: list[Job] = []
    for name in studies:
        sp = plan.study(name)
        if sp.kernel_source is not None:
            from .workflow import code_version
            imp = Job(name, "import",
                      ("import", *shlex.split(sp.import_args()), "--out", str(sp.kernel_path)),
                      _digest(sp.import_args(), code_version(), _content(sp.kernel_source)),
                      results / name / "logs" / "import.log")
            out.append(imp)
            kernel_sig = imp.signature
        else:
            kernel_sig = _content(sp.kernel_path)
        hardware_sig = (_content(sp.hardware_path), _content(sp.fit_path))
        stage_sigs = []
        for stage in sp.study.stages:
            job = Job(name, stage.name,
                      ("stage", str(sp.kernel_path), "--hardware", str(sp.hardware_path),
                       *shlex.split(plan.set_args(name, stage.name)),
                       "--rounds", str(sp.study.rounds),
                       *(("--race",) if sp.study.race else ()),
                       "--out", str(results / name / stage.name), "--drop-on-failure"),
                      _digest(plan.stage_key(name, stage.name), kernel_sig, hardware_sig),
                      results / name / "logs" / f"{stage.name}.log")
            out.append(job)
            stage_sigs.append(job.signature)
        out.append(Job(name, "report",
                       ("report", str(sp.path), "--kernel", str(sp.kernel_path),
                        "--stages-dir", str(results / name),
                        "--out", str(results / name / "report.html"),
                        "--index", str(results / "index.html"),
                        "--index-studies", *index_studies),
                       _digest(_content(sp.path), kernel_sig, stage_sigs, assets)))
    out.append(Job("", "index", ("index", str(results), *index_studies,
                                 "--out", str(results / "index.html")),
                   _digest(index_studies, assets)))
    return out


def targets(plan, studies: list[str]) -> list[str]:
    """The files ``snakemake`` is asked for: the studies' reports and the index."""
    return [f"{plan.results}/{name}/report.html" for name in studies] + \
        [f"{plan.results}/index.html"]


def run_job(job: Job) -> tuple[int, str]:
    """Run the job's ``ptolab`` command here; (exit code, the end of its output)."""
    from .cli import main
    buffer = io.StringIO()
    with contextlib.ExitStack() as stack:
        if job.log is not None:
            job.log.parent.mkdir(parents=True, exist_ok=True)
            stream = stack.enter_context(open(job.log, "w", encoding="utf-8"))
        else:
            stream = buffer
        with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
            try:
                code = main(list(job.argv))
            except SystemExit as exc:           # argparse refusing the arguments
                code = exc.code if isinstance(exc.code, int) else 2
            except KeyboardInterrupt:
                raise
            except Exception:                   # a ptolab bug: keep watching, show it
                traceback.print_exc()
                code = 1
    if code == 130:       # Ctrl-C inside the command, which main() turned into its exit code
        raise KeyboardInterrupt
    text = buffer.getvalue() if job.log is None else job.log.read_text(encoding="utf-8")
    return code, "\n".join(text.splitlines()[-20:])


# What a worker needs imported before it forks.  A plain fork of the watch itself is not
# safe: polars' thread pool, running once a report has been rendered, leaves locks held in
# the child (polars' documentation warns against fork), so workers fork from a server
# process that imported these and ran nothing.
_PRELOAD = ["pipeline.cli", "pipeline.runner", "pipeline.report.render", "simcore.compiler",
            "simcore.machine.engine", "numpy", "polars"]


@functools.lru_cache(maxsize=1)
def workers():
    """The multiprocessing context the parallel jobs run in (its server starts on first use)."""
    import multiprocessing
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def _timed(job: Job, cwd: str) -> tuple[Job, int, str, float]:
    if os.getcwd() != cwd:
        os.chdir(cwd)
    start = time.perf_counter()
    try:
        code, tail = run_job(job)
    except KeyboardInterrupt:
        code, tail = 130, "interrupted"
    return job, code, tail, time.perf_counter() - start


# what a rebuilt stage's line shows, before -> after: the figures a tuning step moves (a
# racing stage's median too: its single run is one draw of the race)
_SHOWN = ("kernel_us", "kernel_us_race_median", "e2e_us", "dev_tasks", "leaf_tasks")


def _metrics(job: Job) -> dict:
    """A stage's parsed metrics as its folder holds them now ({} for other jobs)."""
    if job.log is None or job.name == "import":
        return {}
    path = Path(job.argv[job.argv.index("--out") + 1]) / "parsed" / "metrics.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _moved(job: Job, old: dict | None) -> str:
    """', kernel_us 12.3 -> 10.1, ...' for the figures of a rebuilt stage."""
    new = _metrics(job)
    parts = []
    for key in _SHOWN:
        if key not in new:
            continue
        value = new[key]
        text = f"{value:.1f}" if isinstance(value, float) else str(value)
        if old and key in old and old[key] != value:
            was = old[key]
            text = (f"{was:.1f}" if isinstance(was, float) else str(was)) + " -> " + text
        parts.append(f"{key} {text}")
    return (", " + ", ".join(parts)) if parts else ""


def _phases(todo: list[Job]) -> list[list[Job]]:
    """The jobs in the order their files flow: imports, stages, reports, the index (the
    reports refresh an index that exists; the index job writes a missing or changed one)."""
    rank = {"import": 0, "report": 2, "index": 3}
    phases: list[list[Job]] = [[], [], [], []]
    for job in todo:
        phases[rank.get(job.name, 1)].append(job)
    return [phase for phase in phases if phase]


class Watch:
    """The loop's state: the signature each job was last built with, and the files seen."""

    def __init__(self, workdir: Path, studies: list[str] | None, cores: int = 2,
                 say: Callable[[str], None] = print):
        self.workdir = Path(workdir)
        self.configs = self.workdir / "configs"
        self.memo = self.workdir / ".snakemake" / "ptolab" / "plan.pickle"
        self.requested = list(studies or [])
        self.cores = cores
        self.say = say
        self.built: dict[tuple[str, str], str] = {}
        self.code = code_digest()
        self.touching: subprocess.Popen | None = None
        self.touched: list[Job] = []     # the jobs the running touch may record
        self.touch_stamps: dict = {}      # the files as they were when it was started
        self.default: list[str] = []     # the workflow file's studies
        self.in_sync = False         # whether ``built`` holds a snakemake-complete state
        self.sources: list[Path] = []   # the PyPTO Python kernels studies import
        self.stamps = self.snapshot()
        self.recorded = self.stamps     # the files as snakemake last recorded the outputs

    # -- what to watch -------------------------------------------------------------------
    def studies(self, plan) -> list[str]:
        names = self.requested or self.default
        unknown = [n for n in names if n not in plan.studies]
        if unknown:
            known = ", ".join(plan.studies)
            raise ConfigError(f"no study named {', '.join(unknown)} in workflow.yaml or "
                              f"nightly.yaml; known: {known}.", source=str(self.configs))
        return names

    def snapshot(self) -> dict[str, tuple[int, int]]:
        """(mtime, size) of every config file, imported kernel source and ptolab source."""
        roots = [self.configs] + [REPO / tree for tree in CODE_TREES]
        stamps = {}
        for p in self.sources:
            with contextlib.suppress(OSError):
                st = p.stat()
                stamps[str(p)] = (st.st_mtime_ns, st.st_size)
        for root in roots:
            for p in root.rglob("*"):
                if p.suffix in (".pyc",) or "__pycache__" in p.parts:
                    continue
                with contextlib.suppress(OSError):
                    st = p.stat()
                    if not p.is_dir():
                        stamps[str(p)] = (st.st_mtime_ns, st.st_size)
        return stamps

    # -- building ------------------------------------------------------------------------
    def snakemake(self, plan, studies: list[str], touch: bool = False) -> subprocess.Popen:
        cmd = ["snakemake", "-s", str(SNAKEFILE), "-d", str(self.workdir), f"-c{self.cores}"]
        if touch:
            cmd.append("--touch")
        return subprocess.Popen(cmd + targets(plan, studies), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    def finish_touch(self) -> None:
        """Wait for the background ``snakemake --touch``, then undo what it may have
        recorded wrongly.

        It plans from the configs as they are when it starts: an edit saved between this
        round's plan and then makes it record that edit's settings for files built before
        it.  Every job whose signature now differs from what was built gets its outputs
        dated 1970, older than their inputs, so Snakemake rebuilds them unless this watch
        does first (its next round does)."""
        if self.touching is None:
            return
        out, _ = self.touching.communicate()
        failed = self.touching.returncode != 0
        self.touching = None
        if self.snapshot() != self.touch_stamps:
            # a file changed while it ran: what it planned from cannot be told apart
            try:
                plan, self.default = build_plan(self.configs, self.memo)
                stale = [job for job in jobs(plan, self.studies(plan))
                         if self.built.get(job.key) != job.signature]
            except ConfigError:
                stale = self.touched       # broken now: trust none of what it recorded
            for job in stale:
                for path in self.outputs(job):
                    with contextlib.suppress(OSError):
                        os.utime(path, (0, 0))
        if failed:
            tail = "\n".join(out.splitlines()[-8:])
            self.say("ptolab watch: snakemake could not record the rebuilt files (its next "
                     f"run builds them again):\n{tail}")
        else:
            self.say("ptolab watch: recorded for snakemake")

    @staticmethod
    def outputs(job: Job) -> list[Path]:
        """The files the job's rule declares, as far as Snakemake dates them."""
        out = Path(job.argv[job.argv.index("--out") + 1])
        if job.name in ("import", "report", "index"):
            return [out]
        return [p for p in out.rglob("*") if p.is_file()] if out.exists() else []

    def full_build(self, plan, studies: list[str], why: str) -> bool:
        """Hand the round to ``snakemake``; on success every job counts as built."""
        self.finish_touch()
        self.say(f"ptolab watch: {why}: running snakemake for {', '.join(studies)}")
        start = time.perf_counter()
        proc = self.snakemake(plan, studies)
        out, _ = proc.communicate()
        if proc.returncode != 0:
            self.say("ptolab watch: snakemake failed (results kept as they were):\n"
                     + "\n".join(out.splitlines()[-20:]))
            self.in_sync = False
            return False
        self.built = {job.key: job.signature for job in jobs(plan, studies)}
        self.in_sync = True
        self.say(f"ptolab watch: up to date ({time.perf_counter() - start:.1f} s)")
        return True

    def start(self) -> None:
        if self.cores > 1:
            # the worker server imports ptolab while snakemake builds, not on the first edit
            # that rebuilds several stages
            import multiprocessing.forkserver
            workers()
            multiprocessing.forkserver.ensure_running()
        plan, self.default = build_plan(self.configs, self.memo)
        studies = self.studies(plan)
        self.sources = [Path(sp.kernel_source) for sp in plan.studies.values()
                        if sp.kernel_source is not None]
        self.full_build(plan, studies, "starting")
        self.stamps = self.recorded = self.snapshot()

    def rebuild(self) -> list[str]:
        """One round after an edit: plan, run the changed jobs; return the jobs run."""
        for attempt in range(4):
            try:
                plan, self.default = build_plan(self.configs, self.memo)
                studies = self.studies(plan)
                break
            except ConfigError as exc:
                # a file read while its writer was still at it (an editor that truncates,
                # then writes) reads as broken: look again before calling it an error
                time.sleep(0.25)
                if attempt < 3 and self.changed():
                    continue
                self.say(f"ptolab watch: error: {exc}\n(nothing rebuilt; fix the file and "
                         "save)")
                return []
        self.sources = [Path(sp.kernel_source) for sp in plan.studies.values()
                        if sp.kernel_source is not None]
        # once ptolab's code differs from what this process loaded, every round is
        # snakemake's: the loaded modules stay stale until the watch restarts
        stale_code = code_digest() != self.code
        if stale_code or not self.in_sync:
            why = ("ptolab's code or report templates changed since the watch started "
                   "(restart it for the fast loop)" if stale_code else
                   "the last full build failed")
            self.full_build(plan, studies, why)
            return ["snakemake"]
        every = jobs(plan, studies)
        todo = [job for job in every if self.built.get(job.key) != job.signature]
        if not todo:
            # every output is what these files give (an edit undone, say), but files saved
            # since snakemake last recorded them are newer than the outputs: let it record
            # that, or its next run would redo them
            if self.stamps != self.recorded:
                self.record(plan, studies)
            return []
        self.finish_touch()
        start = time.perf_counter()
        failed: set[str] = set()
        ran = []
        before = {job.key: _metrics(job) for job in todo}
        for phase in _phases(todo):
            for job, code, tail, seconds in self.run_phase(
                    [job for job in phase if job.study not in failed]):
                if code != 0:
                    failed.add(job.study)
                    where = f" (log: {job.log})" if job.log else ""
                    self.say(f"ptolab watch: {job.label} failed{where}:\n{tail}")
                    self.drop_report(every, job)
                    continue
                self.built[job.key] = job.signature
                ran.append(job.label)
                self.say(f"  {job.label}: {seconds:.2f} s{_moved(job, before.get(job.key))}")
        done = [s for s in studies if s not in failed and any(j.study == s for j in todo)]
        if done:
            self.say(f"ptolab watch: rebuilt {', '.join(ran)} in "
                     f"{time.perf_counter() - start:.2f} s")
            self.record(plan, done)
        return ran

    def drop_report(self, every: list[Job], failed: Job) -> None:
        """As the stage rule's failure branch does: the failed job's outputs are gone (a
        stage drops its folder), so its study's report, which showed and linked them, goes
        too and the index is rewritten without it.  Neither counts as built any more, so
        the next round that fixes the edit rebuilds them, whatever the signatures say."""
        self.built.pop(failed.key, None)
        for job in every:
            if job.name == "report" and job.study == failed.study:
                self.built.pop(job.key, None)
                report = self.outputs(job)[0]
                if report.exists():
                    report.unlink()
                    self.say(f"ptolab watch: removed {report} (it showed the stage as it was "
                             f"before)")
            elif job.name == "index":
                run_job(job)

    def record(self, plan, studies: list[str]) -> None:
        """Start ``snakemake --touch`` for ``studies`` in the background: it records their
        outputs as made from the files as they are now (this round planned from them)."""
        self.finish_touch()
        self.touch_stamps = self.recorded = self.stamps
        self.touching = self.snakemake(plan, studies, touch=True)
        self.touched = [job for job in jobs(plan, studies) if job.name != "index"]

    def run_phase(self, phase: list[Job]):
        """Run jobs that do not read each other's files; yield (job, code, tail, seconds).

        Several run side by side (``--cores`` at a time) in processes forked from a server
        that has imported ptolab once (``workers``); one runs here."""
        if len(phase) <= 1 or self.cores <= 1:
            for job in phase:
                yield _timed(job, os.getcwd())
            return
        import concurrent.futures
        with concurrent.futures.ProcessPoolExecutor(
                max_workers=min(self.cores, len(phase)), mp_context=workers()) as pool:
            results = [pool.submit(_timed, job, os.getcwd()) for job in phase]
            for future in concurrent.futures.as_completed(results):
                job, code, tail, seconds = future.result()
                if code == 130:
                    pool.shutdown(cancel_futures=True)
                    raise KeyboardInterrupt
                yield job, code, tail, seconds

    def watch_new_files(self) -> None:
        """After a round: a kernel source a study has started to import is watched from now
        on, while a file saved during the round keeps its old stamp, so the next look sees
        that edit."""
        for path, stamp in self.snapshot().items():
            self.stamps.setdefault(path, stamp)

    def changed(self) -> bool:
        """Whether any watched file changed since the last look (waits until the files
        stop changing, so a save in several writes is one edit)."""
        now = self.snapshot()
        if now == self.stamps:
            return False
        for _ in range(20):
            time.sleep(0.05)
            again = self.snapshot()
            if again == now:
                break
            now = again
        self.stamps = now
        return True

    def loop(self, interval: float, rounds: int | None = None) -> None:
        self.say(f"ptolab watch: watching {self.configs} (Ctrl-C stops)")
        sys.stdout.flush()
        seen = 0
        while rounds is None or seen < rounds:
            time.sleep(interval)
            if self.touching is not None and self.touching.poll() is not None:
                self.finish_touch()
            if not self.changed():
                continue
            seen += 1
            self.rebuild()
            self.watch_new_files()
            sys.stdout.flush()
        self.finish_touch()
