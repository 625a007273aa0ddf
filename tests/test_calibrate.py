"""The calibration procedure: sourced priors, bounds that cannot hide a missing mechanism,
multi-study scoring, write-back with provenance, clear errors."""
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import yaml

from conftest import REPO
from pipeline import calibrate
from pipeline.calibrate import (Calibration, Fit, Parameter, Problem, _choose, compass_search,
                                fit_problem, largest_moves, load_calibration, search_directions,
                                start_points, with_values, write_fit)
from simcore.machine import simulate
from simcore.spec.errors import ConfigError
from simcore.spec.hardware import Hardware, Race, dotted_values, load_hardware, value_at
from simcore.spec.loader import load, read_mapping

HEAD = "core.head_overhead_us"


def test_compass_search_finds_a_bounded_minimum():
    target = np.log([3.0, 0.2])
    f = lambda x: float(((x - target) ** 2).sum())
    x, score, evals, converged = compass_search(f, np.zeros(2), np.log([0.01, 0.01]),
                                                np.log([10.0, 10.0]), 500)
    assert np.allclose(np.exp(x), [3.0, 0.2], rtol=0.02) and evals < 500 and converged
    # a minimum outside the bounds stops at the bound
    x, _, _, _ = compass_search(f, np.zeros(2), np.log([0.01, 0.5]), np.log([10.0, 10.0]), 500)
    assert np.isclose(np.exp(x[1]), 0.5)


def test_a_search_cut_short_by_its_budget_says_it_did_not_converge():
    """The same bowl with too few evaluations: the search stops where it is, far from the
    minimum, and says so, so a caller never takes the point for a fitted value."""
    target = np.log([3.0, 0.2])
    f = lambda x: float(((x - target) ** 2).sum())
    x, _, evals, converged = compass_search(f, np.zeros(2), np.log([0.01, 0.01]),
                                            np.log([10.0, 10.0]), 6)
    assert evals == 6 and not converged
    assert not np.allclose(np.exp(x), [3.0, 0.2], rtol=0.02)


def test_a_search_that_says_it_converged_gives_what_any_larger_budget_gives():
    """The search is deterministic, so one that converged within a budget must stop at the
    same point whatever budget it had beyond that.  A budget that runs out inside a sweep
    of the last steps, after moves that did not help, must not count as converged: some
    moves at that step were never tried."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        target = rng.uniform(-1.0, 1.0, 3)
        scale = rng.uniform(0.5, 5.0, 3)
        f = lambda x: float((scale * (x - target) ** 2).sum())
        low, high = np.full(3, -2.0), np.full(3, 2.0)
        x_full, best_full, _, done = compass_search(f, np.zeros(3), low, high, 2000)
        assert done
        for budget in range(20, 200):
            x, best, _, converged = compass_search(f, np.zeros(3), low, high, budget)
            if converged:
                assert best == best_full and np.array_equal(x, x_full), budget


def test_a_group_direction_finds_what_moving_one_cost_at_a_time_cannot():
    """A race median is flat along each single cost: here the score is the larger of two
    costs, so lowering either alone never helps, and only scaling both together does."""
    f = lambda x: float(max(x[0], x[1]))
    low, high = np.log([0.5, 0.5]), np.log([2.0, 2.0])
    x, score, _, _ = compass_search(f, np.zeros(2), low, high, 200)
    assert score == 0.0 and np.allclose(x, 0.0)          # stuck at the start
    group = [Parameter(path=f"aicpu.c{i}", prior=1.0, source="test", group="aicpu_action")
             for i in range(2)] + [Parameter(path="core.head_overhead_us", prior=1.0,
                                             source="test")]
    directions = search_directions(group)
    assert directions.tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0]]
    x, score, _, _ = compass_search(f, np.zeros(2), low, high, 200,
                                    directions[:, :2][[0, 1, 3]])
    assert np.allclose(np.exp(x), 0.5)                   # both down to their bound together


def _facts_only(tmp_path, name="dav_2201"):
    hw = tmp_path / f"{name}.toml"
    shutil.copy(REPO / f"configs/hardware/{name}.toml", hw)
    return hw


def _flat(hw):
    return dict(dotted_values(hw.model_dump()))


def _param(**kw):
    return {"path": HEAD, "prior": 0.5, "source": "first estimate", **kw}


def _cal(**kw):
    data = {"hardware": "dav_2201", "studies": [{"study": "tiny_a"}],
            "parameters": [_param()], **kw}
    return Calibration.model_validate(data)


def _stage(name, a, b, documented):
    return {"name": name, "description": "a tiny add", "documented": documented,
            "set": {"params.A": a, "params.B": b, "tiles.vec": [1, 2, 4, 256]}}


def tiny_configs(tmp, figures=None, overlay=None, race="shipped"):
    """configs/ with the facts file, the tiling_add kernel and two tiny studies: tiny_a with
    two stages (kernel_us and e2e_us) and tiny_b with one (kernel_us).  ``race``: the facts
    file's [race] table as shipped, None for none, or a dict to put in its place."""
    configs = tmp / "configs"
    for sub in ("hardware", "kernels", "studies"):
        (configs / sub).mkdir(parents=True, exist_ok=True)
    facts = (REPO / "configs/hardware/dav_2201.toml").read_text()
    if race != "shipped":
        facts = facts[:facts.index("\n[race]")] + "\n"
        if race is not None:
            facts += "[race]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in race.items())
    (configs / "hardware/dav_2201.toml").write_text(facts)
    if overlay is not None:
        (configs / "hardware/dav_2201.fit.toml").write_text(overlay)
    shutil.copy(REPO / "configs/kernels/tiling_add.yaml", configs / "kernels")
    figures = figures or {}
    one = {"kernel_us": 1.0, "e2e_us": 1.0}
    studies = {"tiny_a": [_stage("small", 1, 4, figures.get("tiny_a/small", one)),
                          _stage("big", 1, 8, figures.get("tiny_a/big", one))],
               "tiny_b": [_stage("mid", 1, 6, figures.get("tiny_b/mid", {"kernel_us": 1.0}))]}
    for name, stages in studies.items():
        (configs / "studies" / f"{name}.yaml").write_text(yaml.safe_dump(
            {"name": name, "kernel": "tiling_add", "hardware": "dav_2201", "stages": stages}))
    return configs


def documented_at(tmp, values, studies=("tiny_a", "tiny_b")):
    """Figures the model gives with ``values``: a fit to them has a known answer."""
    configs = tiny_configs(tmp)
    cal = _cal(studies=[{"study": s} for s in studies])
    problem = Problem(cal, configs)
    return {r["case"]: {m: r[m] for m in r["metrics"]} for r in problem.measure(values)}


def write_cal(path, params=None, **kw):
    data = {"hardware": "dav_2201", "studies": [{"study": "tiny_a"}, {"study": "tiny_b"}],
            "max_evaluations": 40, "parameters": params or [_param()], **kw}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def ptolab(*args, env=None):
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SOURCE_DATE_EPOCH": "1700000000", **(env or {})})


# --- priors, sources, bounds -------------------------------------------------------------

@pytest.mark.parametrize("missing", ["prior", "source"])
def test_a_parameter_without_prior_or_source_is_refused(tmp_path, missing):
    param = {k: v for k, v in _param().items() if k != missing}
    cal = write_cal(tmp_path / "cal.yaml", [param])
    with pytest.raises(ConfigError) as err:
        load_calibration(cal)
    text = str(err.value)
    assert str(cal) in text and HEAD in text and f"parameters[0].{missing}" in text
    assert "Add it" in text


def test_bounds_must_lie_within_half_to_double_the_prior_unless_physical(tmp_path):
    # default bounds are 0.5x and 2x of the prior
    assert Parameter.model_validate(_param()).bounds == (0.25, 1.0)
    for bad in ({"low": 0.2}, {"high": 1.1}, {"low": 0.1, "high": 3.0}):
        cal = write_cal(tmp_path / "cal.yaml", [_param(**bad)])
        with pytest.raises(ConfigError) as err:
            load_calibration(cal)
        text = str(err.value)
        assert str(cal) in text and "parameters[0]" in text and HEAD in text
        assert "[0.25, 1]" in text and "physical_bound" in text
    # a stated physical reason allows wider bounds
    ok = write_cal(tmp_path / "ok.yaml", [_param(low=0.1, high=3.0,
                                                 physical_bound="launch at least 200 cycles")])
    assert load_calibration(ok).parameters[0].bounds == (0.1, 3.0)
    # the prior must lie inside its bounds, since the search starts there
    with pytest.raises(ConfigError, match="outside its bounds"):
        load_calibration(write_cal(tmp_path / "c.yaml", [_param(low=0.3, high=0.45)]))


def test_unknown_parameter_path_is_a_clear_error():
    with pytest.raises(ConfigError, match="aicpu.warp_speed"):
        value_at(load_hardware("dav_2201"), "aicpu.warp_speed")
    with pytest.raises(Exception):
        Calibration.model_validate({"hardware": "h", "studies": [{"study": "s"}],
                                    "parameters": [], "surprise": 1})


def test_the_real_procedure_sources_every_parameter():
    cal = load_calibration(REPO / "configs/calibration/dav_2201.yaml")
    paths = {p.path for p in cal.parameters}
    assert {"aicpu.dispatch_us", "aicpu.resolve_edge_us", "aicpu.completion_us",
            "pipes.mte2.fixed_cycles", "memory.hbm_gbps"} <= paths
    assert not any("rowsum" in p or "rowamax" in p for p in paths)
    upstream = {p.path: p.prior for p in cal.parameters}
    # upstream AICPUConfig.toml: 200 / 390 / 240 cycles at 1.8 GHz
    assert upstream["aicpu.dispatch_us"] == pytest.approx(200 / 1800, rel=0.01)
    assert upstream["aicpu.resolve_edge_us"] == pytest.approx(390 / 1800, rel=0.01)
    assert upstream["aicpu.completion_us"] == pytest.approx(240 / 1800, rel=0.01)
    assert {s.study for s in cal.studies} >= {"glm_attention_stitch", "skinny_matmul_rewrite"}


# --- scoring -------------------------------------------------------------------------------

def test_each_study_weighs_its_mean_not_its_figure_count():
    problem = object.__new__(Problem)
    problem.weights = {"a": 1.0, "b": 3.0}
    row = lambda study, got, doc: {"study": study, "metrics": ["kernel_us"],
                                   "kernel_us": got, "documented_kernel_us": doc}
    rows = [row("a", 200.0, 100.0), row("a", 50.0, 50.0), row("b", math.e, 1.0)]
    assert problem.score_rows(rows) == pytest.approx(math.log(2) ** 2 / 2 + 3.0)
    # ten copies of a's figures do not make study a count more
    assert problem.score_rows(rows[:2] * 10 + rows[2:]) == pytest.approx(
        problem.score_rows(rows))


def test_the_fit_uses_every_study_and_recovers_a_known_value(tmp_path):
    target = documented_at(tmp_path / "t", {HEAD: 0.7})
    configs = tiny_configs(tmp_path, target)
    cal = _cal(studies=[{"study": "tiny_a"}, {"study": "tiny_b"}], max_evaluations=40)
    problem = Problem(cal, configs)
    assert [c.name for c in problem.cases] == ["tiny_a/small", "tiny_a/big", "tiny_b/mid"]
    assert [c.metrics for c in problem.cases] == [["kernel_us", "e2e_us"]] * 2 + [["kernel_us"]]
    result = fit_problem(problem)
    assert result.values[HEAD] == pytest.approx(0.7, rel=0.03) and not result.on_bound
    assert result.score < 1e-4


def test_the_fit_starts_at_the_prior_not_the_last_fit(tmp_path):
    at_prior = documented_at(tmp_path / "t", {HEAD: 0.5})
    # an earlier overlay put head overhead at 0.9: the fit neither starts nor prices there
    configs = tiny_configs(tmp_path, at_prior, overlay="[core]\nhead_overhead_us = 0.9\n")
    problem = Problem(_cal(studies=[{"study": "tiny_a"}], max_evaluations=10), configs)
    assert value_at(problem.hw, HEAD) == 0.5   # facts file
    assert fit_problem(problem).values[HEAD] == 0.5


def test_the_starts_are_the_priors_then_the_same_draws_every_run():
    cal = _cal(starts={"count": 4, "spread": [0.7, 1.4]},
               parameters=[_param(), _param(path="pipes.mte2.fixed_cycles", prior=1405.0)])
    points = start_points(cal)
    assert len(points) == 4
    assert np.allclose(np.exp(points[0]), [0.5, 1405.0])              # the priors first
    factors = np.exp(np.array(points[1:])) / [0.5, 1405.0]
    assert ((factors >= 0.7 - 1e-9) & (factors <= 1.4 + 1e-9)).all()
    assert len({tuple(np.round(f, 6)) for f in factors}) == 3          # three distinct draws
    assert all(np.array_equal(a, b) for a, b in zip(points, start_points(cal)))
    with pytest.raises(ValueError, match="spread"):
        _cal(starts={"count": 2, "spread": [1.2, 1.4]})


def test_the_fit_takes_the_best_minimum_inside_the_bounds_unless_a_bound_asks_clearly():
    """Among the searches that converged: the lowest score inside every bound; a minimum on
    a bound wins only when it scores lower by more than the tolerance (then the fit fails
    on it, as a missing mechanism); a search cut short by its budget is not a minimum."""
    cal = _cal(starts={"count": 4, "bound_tolerance": 0.05})      # head overhead, 0.1 .. 2
    inside, on_low = np.log([0.4]), np.log([0.1])
    found = [(inside, 0.0100, 50, True), (on_low, 0.0098, 50, True),
             (inside, 0.0090, 50, True), (inside, 0.0010, 50, False)]
    assert _choose(cal, found) == 2                     # 0.0098 on a bound: within 5 %
    found[1] = (on_low, 0.0080, 50, True)
    assert _choose(cal, found) == 1                     # 11 % below: the figures want it
    # none converged: the lowest of all, even on a bound and within the tolerance
    assert _choose(cal, [(inside, 0.0200, 9, False), (on_low, 0.0199, 9, False)]) == 1
    # a converged minimum is never passed over for a lower search cut short by its budget
    assert _choose(cal, [(on_low, 0.03, 50, True), (inside, 0.001, 9, False)]) == 0


def test_searches_from_several_starts_give_the_same_fit_in_parallel_or_not(tmp_path,
                                                                           monkeypatch):
    target = documented_at(tmp_path / "t", {HEAD: 0.7})
    configs = tiny_configs(tmp_path, target)
    cal = _cal(studies=[{"study": "tiny_a"}], max_evaluations=30, starts={"count": 3})
    problem = Problem(cal, configs)
    pools = []
    real_pool = calibrate.ProcessPoolExecutor
    monkeypatch.setattr(calibrate, "ProcessPoolExecutor",
                        lambda *a, **kw: pools.append(a) or real_pool(*a, **kw))
    monkeypatch.setattr(calibrate, "_cores", lambda: 4)
    parallel = fit_problem(problem)
    assert pools == [(3,)]                  # three starts, three forked workers
    monkeypatch.setattr(calibrate, "_cores", lambda: 1)
    serial = fit_problem(problem)
    assert len(pools) == 1                  # one core: no pool
    assert len(parallel.starts) == 3 and parallel.starts == serial.starts
    assert parallel.values == serial.values and parallel.start == serial.start
    assert parallel.values[HEAD] == pytest.approx(0.7, rel=0.03)
    assert parallel.starts[parallel.start]["score"] == min(r["score"] for r in parallel.starts)


# --- write-back ----------------------------------------------------------------------------

def test_the_shipped_model_is_the_facts_or_a_fit_of_the_current_procedure():
    """An overlay, when one is shipped, replaces exactly the keys the procedure fits and
    leaves the held ones at their priors; with none, the procedure's priors are the facts
    themselves, so the model a user runs is the one the fit starts from."""
    procedure = "configs/calibration/dav_2201.yaml"
    params = load_calibration(REPO / procedure).parameters
    facts = _flat(load(Hardware, REPO / "configs/hardware/dav_2201.toml", "hardware"))
    merged = _flat(load_hardware("dav_2201"))
    overlay = REPO / "configs/hardware/dav_2201.fit.toml"
    if not overlay.exists():
        assert merged == facts
        assert {p.path: p.prior for p in params} == {p.path: facts[p.path] for p in params}
        return
    text = overlay.read_text()
    fitted = dict(dotted_values(read_mapping(overlay)))
    changed = {k for k in facts if facts[k] != merged[k]}
    assert fitted and changed <= set(fitted)
    assert all(merged[k] == v for k, v in fitted.items())
    assert f"# procedure: {procedure} " in text, \
        "the overlay was fitted by an older procedure: rerun ptolab calibrate " + procedure
    assert set(fitted) == {p.path for p in params if not p.held}
    # a held parameter is the facts value, its prior
    assert all(merged[p.path] == facts[p.path] == p.prior for p in params if p.held)


def test_write_fit_writes_only_the_overlay_deterministically(tmp_path):
    hw = _facts_only(tmp_path)
    facts_before = hw.read_bytes()
    cal = Calibration.model_validate({"hardware": "dav_2201", "studies": [{"study": "s"}],
                                      "parameters": [
        {"path": "aicpu.dispatch_us", "prior": 0.111, "source": "upstream"},
        {"path": "pipes.mte2.fixed_cycles", "prior": 1405.0, "source": "upstream"}]})
    table = [{"case": "s/a", "study": "s", "stage": "a", "metrics": ["kernel_us", "e2e_us"],
              "kernel_us": 110.0, "documented_kernel_us": 100.0,
              "e2e_us": 190.0, "documented_e2e_us": 200.0}]
    fit = Fit({"pipes.mte2.fixed_cycles": 900.0, "aicpu.dispatch_us": 0.1}, 0.0123, 7, table)
    overlay = write_fit(hw, fit.values, "cal.yaml", cal, fit, date="2026-01-02")
    first = overlay.read_bytes()
    write_fit(hw, fit.values, "cal.yaml", cal, fit, date="2026-01-02")
    assert overlay.read_bytes() == first and hw.read_bytes() == facts_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dav_2201.fit.toml", "dav_2201.toml"]
    text = first.decode()
    header = [line for line in text.splitlines() if line.startswith("#")]
    for fact in ("cal.yaml", "2026-01-02", "0.0123", "studies s", "documented 100",
                 "converged after 7 evaluations"):
        assert any(fact in line for line in header), fact
    # values follow the facts file's order of tables ([pipes.mte2] before [aicpu])
    assert text.index("[pipes.mte2]") < text.index("[aicpu]")
    fitted = load_hardware(hw)
    assert fitted.pipes.mte2.fixed_cycles == 900.0 and fitted.aicpu.dispatch_us == 0.1
    with pytest.raises(ConfigError, match="aicpu.nonexistent"):
        write_fit(hw, {"aicpu.nonexistent": 1.0}, "cal.yaml", cal, fit, date="2026-01-02")
    # a fit on a bound is never written, even when called directly
    on_bound = Fit(fit.values, 0.0123, 7, table, [("aicpu.dispatch_us", "low", 0.0555, 0.0555)])
    with pytest.raises(ConfigError, match="aicpu.dispatch_us ended on its low bound"):
        write_fit(hw, fit.values, "cal.yaml", cal, on_bound, date="2026-01-02")
    assert overlay.read_bytes() == first
    # nor one whose search stopped at its budget
    cut_short = Fit(fit.values, 0.0123, 7, table, converged=False)
    with pytest.raises(ConfigError, match="stopped at its budget"):
        write_fit(hw, fit.values, "cal.yaml", cal, cut_short, date="2026-01-02")
    assert overlay.read_bytes() == first


def test_calibrate_writes_the_overlay_and_a_refit_does_not_drift(tmp_path):
    target = documented_at(tmp_path / "t", {HEAD: 0.7})
    configs = tiny_configs(tmp_path, target)
    facts = configs / "hardware/dav_2201.toml"
    facts_before = facts.read_bytes()
    cal = write_cal(tmp_path / "cal.yaml")
    proc = ptolab("calibrate", cal, "--configs", configs)
    assert proc.returncode == 0, proc.stderr
    assert "tiny_b/mid" in proc.stdout and "prior 0.5" in proc.stdout
    assert facts.read_bytes() == facts_before
    overlay = configs / "hardware/dav_2201.fit.toml"
    first = overlay.read_text()
    assert f"# command: ptolab calibrate {cal.as_posix()}" in first and "2023-11-14" in first
    assert read_mapping(overlay)["core"]["head_overhead_us"] == pytest.approx(0.7, rel=0.03)
    # the second fit starts from the prior again, not from the first fit: same bytes
    assert ptolab("calibrate", cal, "--configs", configs).returncode == 0
    assert overlay.read_text() == first


def test_calibrate_says_when_the_values_in_place_score_better(tmp_path):
    """A refit from the priors can stop short of what the overlay already holds (a short
    trial here; another minimum after a fact moved, docs/sources.md §3): the command scores
    the values in place under the same figures and says so before anything is replaced."""
    target = documented_at(tmp_path / "t", {HEAD: 0.7})
    configs = tiny_configs(tmp_path, target, overlay="# an earlier fit\n[core]\nhead_overhead_us = 0.7\n")
    cal = write_cal(tmp_path / "cal.yaml")
    short = ptolab("calibrate", cal, "--configs", configs, "--dry-run", "--max-evaluations", "1")
    assert "values in dav_2201.fit.toml score" in short.stdout
    assert "values in place score better" in short.stderr
    # one evaluation is no fit: it says so and fails, whatever it found
    assert short.returncode == 1 and "NOT converged" in short.stdout
    assert "before converging" in short.stderr
    before = (configs / "hardware/dav_2201.fit.toml").read_bytes()
    written = ptolab("calibrate", cal, "--configs", configs, "--max-evaluations", "1")
    assert written.returncode == 1 and "Nothing written" in written.stderr
    assert (configs / "hardware/dav_2201.fit.toml").read_bytes() == before
    full = ptolab("calibrate", cal, "--configs", configs, "--dry-run")
    assert full.returncode == 0 and "score better" not in full.stderr


def test_a_fit_ending_on_a_bound_fails_and_writes_nothing(tmp_path):
    # the figures want 5x the prior's head overhead: beyond the 2x bound
    target = documented_at(tmp_path / "t", {HEAD: 2.5})
    old = "# an earlier fit\n[core]\nhead_overhead_us = 0.4\n"
    configs = tiny_configs(tmp_path, target, overlay=old)
    cal = write_cal(tmp_path / "cal.yaml")
    for extra in ((), ("--dry-run",)):
        proc = ptolab("calibrate", cal, "--configs", configs, *extra)
        assert proc.returncode == 1, proc.stderr
        assert f"{HEAD} ended on its high bound" in proc.stderr
        assert "wants it higher" not in proc.stderr and "want it higher" in proc.stderr
        assert "Nothing written" in proc.stderr
        assert (configs / "hardware/dav_2201.fit.toml").read_text() == old


# --- races -------------------------------------------------------------------------------

RACE = {"paths": ["aicpu.dispatch_us", "aicpu.completion_us"],
        "factors": [0.98, 1.0, 1.02], "why": "which thread owns a chain is a race"}


@pytest.mark.parametrize("factors", [[0.98, 0.99, 1.0, 1.02], [0.98, 0.99, 1.01], [0.3, 1.0, 1.02],
                                     [0.98, 1.0, 1.0]])
def test_race_factors_are_an_odd_set_around_the_model_as_shipped(factors):
    """An even count has no middle run, a set without 1.0 leaves the shipped model out, a
    factor past 0.5-2x is no timing noise, and a repeated factor is the same run twice."""
    with pytest.raises(ValueError, match="race factors"):
        Race(**{**RACE, "factors": factors})


def test_a_racing_study_needs_a_race_table_of_costs_that_exist(tmp_path):
    """A study marked race on a chip without a [race] table is refused with the hardware
    file named; a race path that is no field, or no cost (a core count), is refused when the
    hardware file loads."""
    cal = _cal(studies=[{"study": "tiny_a", "race": True}])
    with pytest.raises(ConfigError, match=r"race.*\[race\] table") as exc:
        Problem(cal, tiny_configs(tmp_path / "none", race=None))
    assert "dav_2201.toml" in str(exc.value)
    for path, why in (("aicpu.warp_speed", "warp_speed"), ("cores.aic", "not costs")):
        configs = tiny_configs(tmp_path / path, race={**RACE, "paths": [path]})
        with pytest.raises(ConfigError, match=why):
            load_hardware("dav_2201", configs / "hardware")


def test_a_racing_case_is_scored_by_the_median_run_and_reports_the_race_range(tmp_path):
    """The median is one of the runs, the range holds every run, and a case not marked race
    is the single run of the model as shipped."""
    configs = tiny_configs(tmp_path, race=RACE)
    plain = Problem(_cal(), configs).measure({})
    racing = Problem(_cal(studies=[{"study": "tiny_a", "race": True}]), configs)
    rows = racing.measure({})
    hw = load_hardware("dav_2201", configs / "hardware")
    for row, single, case in zip(rows, plain, racing.cases):
        runs = []
        for f in RACE["factors"]:
            trial = with_values(hw, {"aicpu.dispatch_us": hw.aicpu.dispatch_us * f,
                                     "aicpu.completion_us": hw.aicpu.completion_us * f})
            runs.append(simulate(trial, case.program, case.kernel.options.runtime_options))
        for m in row["metrics"]:
            got = sorted(getattr(tl, m) for tl in runs)
            assert row[m] == pytest.approx(got[1])
            assert row[f"spread_{m}"] == pytest.approx((got[0], got[2]))
            assert got[0] < got[2]          # the AICPU costs move these stages
            assert single[m] == pytest.approx(getattr(runs[1], m))
            assert f"spread_{m}" not in single


def test_glm_stitched_dev_tasks_race_where_one_call_per_dev_task_does_not():
    """At the shipped model, a few percent on one AICPU cost (dispatch, a fraction of a
    schedule thread's work) move glm_attention's stitch-512 stage (eight softmax chains in
    one dev task on three schedule AICPUs: which AICPU owns which chain changes) by a few
    percent (2.6 % at the fit of 2026-12-05), and its stitch-1 stage (one root call per dev task) by under 1 %: the reason
    the calibration scores glm by the median over race variants instead of a single run.
    Stitch 128 (four chains a dev task) moves more than stitch 1; how much depends on
    where the fit puts it (docs/fidelity.md gives each stage's race range)."""
    cal = load_calibration(REPO / "configs/calibration/dav_2201.yaml")
    assert next(s for s in cal.studies if s.study == "glm_attention_stitch").race
    glm_only = [s.model_copy(update={"race": False}) for s in cal.studies
                if s.study == "glm_attention_stitch"]
    problem = Problem(cal.model_copy(update={"studies": glm_only}),
                      REPO / "configs")
    shipped = load_hardware("dav_2201")
    spread = {}
    for case in problem.cases:
        times = [problem.measure({"aicpu.dispatch_us": shipped.aicpu.dispatch_us * f},
                                 [case], base=shipped)[0]["kernel_us"]
                 for f in (0.97, 0.98, 0.99, 1.0, 1.01, 1.02, 1.03)]
        spread[case.stage] = max(times) / min(times) - 1
    assert spread["stitch_512"] > 0.02, spread
    assert spread["stitch_1"] < 0.01, spread
    assert spread["stitch_512"] > 20 * spread["stitch_1"], spread
    assert spread["stitch_128"] > spread["stitch_1"], spread


def test_a_refit_names_the_parameters_it_moved_furthest_either_way():
    """What a left-out case pins shows in how far its refit moves each parameter: a halving
    counts as much as a doubling, moves under the floor are no moves, and ties are broken
    by name so the report is the same every run."""
    before = {"a": 1.0, "b": 2.0, "c": 4.0, "d": 8.0}
    after = {"a": 2.0, "b": 1.0, "c": 4.2, "d": 2.0}
    assert largest_moves(before, after) == [("d", 8.0, 2.0), ("a", 1.0, 2.0)]
    assert largest_moves(before, after, count=3) == [("d", 8.0, 2.0), ("a", 1.0, 2.0),
                                                     ("b", 2.0, 1.0)]
    assert largest_moves(before, before) == []
    assert largest_moves({"c": 4.0}, {"c": 4.2}) == []          # 1.05x: under the floor


def test_the_start_summary_compares_search_minima_and_names_the_chosen_ones():
    """The starts are chosen by their search minima; the fit's own score is measured again
    at its rounded values, so the summary gives the chosen start's minimum beside the
    others' and a reader can see the choice was the lowest."""
    from types import SimpleNamespace
    from pipeline.calibrate import start_summary
    start = lambda score, bound=(): {"score": score, "evaluations": 10, "converged": True,
                                     "on_bound": list(bound)}
    fit = SimpleNamespace(starts=[start(0.0016, ["x"]), start(0.0012), start(0.0013)], start=1)
    line = start_summary(fit)
    assert "from start 1 (its search minimum 0.0012" in line
    assert "priors 0.0016 on a bound" in line and "start 2 0.0013" in line
