"""ptolab validate: documented vs simulated, leave-one-case-out, physics checks."""
import json
import re
from dataclasses import replace

import pytest
from pydantic import ValidationError

from test_calibrate import (HEAD, _cal, _param, documented_at, ptolab, tiny_configs,
                            write_cal)
from simcore.spec.errors import ConfigError
from pipeline.calibrate import (Problem, _mechanism_section, fit_problem, leave_one_out,
                                load_calibration, mechanism_checks, physics_checks, timed,
                                with_values)

ROOFLINE = {"hbm_gbps": 1600.0, "hbm_source": "published 910B HBM2e",
            "cube_flops_per_cycle": 8192.0, "cube_source": "one fp16 fractal per cycle"}
STREAM = {"name": "stream", "kernel": "tiling_add",
          "set": {"params.A": 1, "params.B": 32, "params.C": 64, "params.D": 1024,
                  "tiles.vec": [1, 1, 8, 1024]},
          "flops": "A*B*C*D", "bytes": "3*4*A*B*C*D", "within": [0.05, 1.02],
          "why": "an elementwise add: HBM-bound"}


def test_leave_one_out_never_simulates_the_case_it_predicts(tmp_path):
    configs = tiny_configs(tmp_path, documented_at(tmp_path / "t", {HEAD: 0.7}))
    cal = load_calibration(write_cal(tmp_path / "cal.yaml"))
    problem = Problem(cal, configs)
    seen = []
    measure = problem.measure
    problem.measure = lambda values, cases=None, base=None: (
        seen.append([c.name for c in (problem.cases if cases is None else cases)])
        or measure(values, cases, base))
    fit_problem(problem, frozenset({"tiny_a/big"}), 6)
    *search, prediction = seen
    assert search and all("tiny_a/big" not in names for names in search)
    assert "tiny_a/big" in prediction
    seen.clear()
    loo = leave_one_out(problem, 3)
    assert [e["case"] for e in loo] == [c.name for c in problem.cases]
    assert all(e["row"]["case"] == e["case"] for e in loo)


def test_a_left_out_outlier_is_predicted_worse_than_it_is_fitted(tmp_path):
    # two cases agree on head overhead 0.7; the third documents 0.35's figure: fitting it
    # pulls the value toward it, leaving it out does not
    figures = documented_at(tmp_path / "t", {HEAD: 0.7})
    figures["tiny_b/mid"] = documented_at(tmp_path / "u", {HEAD: 0.35})["tiny_b/mid"]
    configs = tiny_configs(tmp_path, figures)
    problem = Problem(load_calibration(write_cal(tmp_path / "cal.yaml")), configs)
    full = {r["case"]: r for r in fit_problem(problem, max_evaluations=20).table}
    out = {e["case"]: e["row"] for e in leave_one_out(problem, 20)}
    err = lambda r: abs(r["kernel_us"] / r["documented_kernel_us"] - 1)
    assert err(out["tiny_b/mid"]) > err(full["tiny_b/mid"])


def test_the_roofline_check_follows_the_chip_numbers(tmp_path):
    configs = tiny_configs(tmp_path)
    cal = load_calibration(write_cal(tmp_path / "cal.yaml", roofline=ROOFLINE,
                                     physics=[STREAM]))
    hw = Problem(cal, configs).hw
    (check,) = physics_checks(cal, configs, hw)
    n = 32 * 64 * 1024
    assert check["bound"] == "memory"
    assert check["roofline_us"] == pytest.approx(12 * n / 1600e9 * 1e6)
    assert check["efficiency"] == pytest.approx(check["roofline_us"] / check["kernel_us"])
    assert check["achieved_gbps"] == pytest.approx(12 * n / check["kernel_us"] / 1e3)
    # the model's stream slows with its HBM: a quarter of the bandwidth, a slower kernel
    (slow,) = physics_checks(cal, configs, with_values(hw, {"memory.hbm_gbps": 400.0}))
    assert slow["kernel_us"] > 1.5 * check["kernel_us"]


def test_validate_writes_fidelity_md_with_every_section(tmp_path):
    configs = tiny_configs(tmp_path, documented_at(tmp_path / "t", {HEAD: 0.7}))
    cal = write_cal(tmp_path / "cal.yaml", [_param()], roofline=ROOFLINE, physics=[STREAM])
    # a study that documents figures but is not in the procedure is named, not hidden
    (configs / "studies/tiny_c.yaml").write_text(
        (configs / "studies/tiny_b.yaml").read_text().replace("name: tiny_b", "name: tiny_c"))
    out = tmp_path / "docs/fidelity.md"
    out.parent.mkdir()
    proc = ptolab("validate", cal, "--configs", configs, "--out", out, "--quick")
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    for section in ("# Model fidelity: dav_2201", "## Verdict", "## Documented figures",
                    "## Parameters", "## Leave-one-case-out", "## Physics checks"):
        assert section in text, section
    for fact in ("tiny_a/small", "tiny_b/mid", f"`{HEAD}`", "| 0.5 | 0.25 .. 1 |",
                 "| stream | tiling_add | memory |", "all cases", "first estimate",
                 "does not use: tiny_c."):
        assert fact in text, fact
    assert "--quick" in text
    # every leave-one-out row has a 'moves most' cell: the one parameter, or nothing (what
    # it says is tested on an outlier below; --quick refits stop where their budget ends)
    loo = text.split("## Leave-one-case-out")[1].split("## Physics checks")[0]
    rows = [line for line in loo.splitlines() if line.startswith("| tiny_")]
    assert len(rows) == 3                         # tiny_a's two stages and tiny_b's one
    for row in rows:
        moved = row.rstrip(" |").rsplit("|", 1)[1].strip()
        assert moved == "none" or moved.startswith(f"`{HEAD}`"), row
    # deterministic: a second run writes the same bytes
    first = out.read_bytes()
    assert ptolab("validate", cal, "--configs", configs, "--out", out, "--quick").returncode == 0
    assert out.read_bytes() == first


def test_validate_fails_on_a_physics_check_outside_its_range(tmp_path):
    configs = tiny_configs(tmp_path, documented_at(tmp_path / "t", {HEAD: 0.5}))
    impossible = {**STREAM, "within": [1.5, 2.0]}   # faster than the roofline
    cal = write_cal(tmp_path / "cal.yaml", [_param()], roofline=ROOFLINE,
                    physics=[impossible], max_evaluations=2, loo_max_evaluations=1)
    out = tmp_path / "f.md"
    proc = ptolab("validate", cal, "--configs", configs, "--out", out, "--quick")
    assert proc.returncode == 1
    assert "physics check stream" in proc.stderr
    assert "FAIL: physics check stream" in out.read_text()


def test_a_held_out_study_is_predicted_and_never_fitted(tmp_path):
    # tiny_b documents the figure of head overhead 0.35, tiny_a that of 0.7: fitted with
    # tiny_b the fit would move toward 0.35; held out, the fit sees only tiny_a
    figures = documented_at(tmp_path / "t", {HEAD: 0.7})
    figures["tiny_b/mid"] = documented_at(tmp_path / "u", {HEAD: 0.35})["tiny_b/mid"]
    configs = tiny_configs(tmp_path, figures)
    cal = load_calibration(write_cal(tmp_path / "cal.yaml", studies=[{"study": "tiny_a"}],
                                     held_out=[{"study": "tiny_b"}]))
    problem = Problem(cal, configs)
    assert all(c.study == "tiny_a" for c in problem.cases)
    seen = []
    measure = problem.measure
    problem.measure = lambda values, cases=None, base=None: (
        seen.append([c.name for c in (problem.cases if cases is None else cases)])
        or measure(values, cases, base))
    fitted = fit_problem(problem, max_evaluations=20)
    assert seen and all("tiny_b/mid" not in names for names in seen)
    assert problem._held is None          # a fit never even compiles the held-out stages
    assert [c.name for c in problem.held] == ["tiny_b/mid"]
    assert fitted.values[HEAD] == pytest.approx(0.7, rel=0.05)
    # predicted with the fit that never saw it: the figure of 0.7, not its own
    (row,) = measure(fitted.values, problem.held)
    assert row["kernel_us"] > 1.05 * row["documented_kernel_us"]


def test_validate_reports_held_out_predictions_and_their_order(tmp_path):
    configs = tiny_configs(tmp_path, documented_at(tmp_path / "t", {HEAD: 0.7}))
    cal = write_cal(tmp_path / "cal.yaml", [_param()], studies=[{"study": "tiny_b"}],
                    held_out=[{"study": "tiny_a"}], max_evaluations=4, loo_max_evaluations=2)
    out = tmp_path / "f.md"
    proc = ptolab("validate", cal, "--configs", configs, "--out", out, "--quick")
    text = out.read_text()
    assert "## Held-out cases" in text
    section = text.split("## Held-out cases")[1].split("## Parameters")[0]
    assert "| tiny_a/small | kernel_us |" in section and "| tiny_a/big | e2e_us |" in section
    # tiny_a's big stage is slower than its small one, in the figures and in the model
    assert "documented big > small; predicted big > small (holds)" in section
    # a held-out study is used by the procedure, so it is not listed as unused
    assert "does not use" not in text
    assert proc.returncode in (0, 1), proc.stderr
    # the same figures, for the study reports, in the .json beside the markdown
    summary = json.loads((tmp_path / "f.json").read_text())
    assert {f["case"] for f in summary["held_out"]} == {"tiny_a/small", "tiny_a/big"}
    assert summary["in_fit"] and all(f["case"].startswith("tiny_b/") for f in summary["in_fit"])
    assert all(f["predicted"] > 0 and f["documented"] > 0
               for f in summary["held_out"] + summary["in_fit"])
    assert summary["quick"] and summary["rms_log"]["held_out"] >= 0
    # each held-out figure's predictions over every fit made: shipped, fresh, and the one
    # leave-one-out refit (tiny_b/mid is the only fitted case; nothing held, so no free fit)
    spread = {(c["case"], c["metric"]): c for c in summary["held_out_refit_spread"]}
    assert set(spread) == {(f["case"], f["metric"]) for f in summary["held_out"]}
    for f in summary["held_out"]:
        c = spread[f["case"], f["metric"]]
        assert c["fits"] == 3 and c["low"] <= f["predicted"] <= c["high"]
    assert "predictions span" in section


def test_held_out_pipe_shares_and_l2_hits_are_compared_beside_the_times(tmp_path):
    """A held-out stage that documents what the chip's profile showed (pipe busy shares,
    the L2 hit rate) gets those figures beside the model's, a pipe as its busy time on a
    core, so a time that is off can be traced to the pipe it comes from.  The fit never
    measures them."""
    figures = documented_at(tmp_path / "t", {HEAD: 0.7})
    first = Problem(_cal(studies=[{"study": "tiny_a"}]), tiny_configs(tmp_path / "m", figures))
    case = next(c for c in first.cases if c.stage == "small")
    own = timed(with_values(first.hw, {HEAD: 0.7}), replace(case, checks={"l2_hit_rate": 0}))
    # the chip documented with its vector pipe busy twice the model's time
    figures["tiny_a/small"] |= {"aiv_vec_ratio": 2 * own["aiv_vec_ratio"], "l2_hit_rate": 0.5}
    problem = Problem(_cal(held_out=[{"study": "tiny_a"}], studies=[{"study": "tiny_b"}]),
                      tiny_configs(tmp_path, figures))
    assert all(not c.checks for c in problem.cases)        # fitted stages measure times only
    # even one that documents a profile figure: only held-out stages are compared on them
    figures["tiny_b/mid"] = {**figures["tiny_b/mid"], "aiv_vec_ratio": 0.5}
    fitted = Problem(_cal(held_out=[{"study": "tiny_a"}], studies=[{"study": "tiny_b"}]),
                     tiny_configs(tmp_path / "f", figures))
    assert fitted.cases[0].name == "tiny_b/mid" and not fitted.cases[0].checks
    small, big = problem.measure({HEAD: 0.7}, problem.held)
    assert "checks" not in big                               # it documents none
    checks = {c["figure"]: c for c in mechanism_checks([small, big])}
    assert set(checks) == {"aiv_vec_ratio", "l2_hit_rate"}
    vec = checks["aiv_vec_ratio"]
    assert vec["predicted"] == pytest.approx(own["aiv_vec_ratio"], rel=1e-6)
    assert vec["predicted_busy_us"] == pytest.approx(vec["predicted"] * small["kernel_us"],
                                                     rel=1e-3)
    assert vec["documented_busy_us"] == pytest.approx(
        2 * own["aiv_vec_ratio"] * small["documented_kernel_us"], rel=1e-3)
    assert checks["l2_hit_rate"] == {"case": "tiny_a/small", "figure": "l2_hit_rate",
                                     "documented": 0.5, "predicted": own["l2_hit_rate"]}
    (vec_line,) = [line for line in _mechanism_section([small]) if "AIV Vector busy" in line]
    assert vec_line.rstrip(" |").endswith("0.50")          # the model's half of the chip's


def test_a_study_both_fitted_and_held_out_is_refused(tmp_path):
    cal = write_cal(tmp_path / "cal.yaml", held_out=[{"study": "tiny_a"}])
    with pytest.raises(ConfigError, match="tiny_a is listed twice"):
        load_calibration(cal)


def test_a_study_may_put_some_stages_in_the_fit_and_hold_the_others_out(tmp_path):
    configs = tiny_configs(tmp_path, documented_at(tmp_path / "t", {HEAD: 0.7}))
    split = write_cal(tmp_path / "cal.yaml", studies=[{"study": "tiny_a", "stages": ["small"]},
                                                      {"study": "tiny_b"}],
                      held_out=[{"study": "tiny_a", "stages": ["big"]}])
    problem = Problem(load_calibration(split), configs)
    assert "tiny_a/small" in {c.name for c in problem.cases}
    assert "tiny_a/big" not in {c.name for c in problem.cases}
    assert [c.name for c in problem.held] == ["tiny_a/big"]
    twice = write_cal(tmp_path / "twice.yaml", studies=[{"study": "tiny_a", "stages": ["small"]}],
                      held_out=[{"study": "tiny_a", "stages": ["small", "big"]}])
    with pytest.raises(ConfigError, match="tiny_a/small is listed twice"):
        load_calibration(twice)
    unknown = write_cal(tmp_path / "unknown.yaml", studies=[{"study": "tiny_a",
                                                             "stages": ["huge"]}])
    with pytest.raises(ConfigError, match="no stage huge"):
        Problem(load_calibration(unknown), configs).cases


def test_the_order_check_ignores_stages_documented_alike():
    from pipeline.calibrate import _same_order
    rows = [{"documented_kernel_us": 10.0, "kernel_us": 9.0},
            {"documented_kernel_us": 10.0, "kernel_us": 12.0},
            {"documented_kernel_us": 5.0, "kernel_us": 6.0}]
    assert _same_order(rows, "kernel_us")          # the two tens may come either way round
    rows[2]["kernel_us"] = 13.0
    assert not _same_order(rows, "kernel_us")


def test_the_stage_order_shows_predictions_that_tie():
    """Two stages predicted alike are not ordered: the line says so, and the check fails when
    the documented figures differ."""
    from pipeline.calibrate import _same_order, _stage_order
    rows = [{"stage": "whole", "documented_kernel_us": 828.0, "kernel_us": 798.7},
            {"stage": "quarters", "documented_kernel_us": 366.0, "kernel_us": 798.7}]
    assert _stage_order(rows, "documented_kernel_us") == "whole > quarters"
    assert _stage_order(rows, "kernel_us") in ("whole = quarters", "quarters = whole")
    assert not _same_order(rows, "kernel_us")


def test_a_held_parameter_gets_a_free_fit_column_beside_the_fitted_and_held_out_figures(tmp_path):
    """The figures come from head overhead 0.7 and the procedure holds it at its prior 0.5:
    the fresh fit stays off them, the 'free fit' column (nothing held) shows what they ask
    for, on the fitted cases and on the held-out one."""
    configs = tiny_configs(tmp_path, documented_at(tmp_path / "t", {HEAD: 0.7}))
    cal = write_cal(tmp_path / "cal.yaml", [_param(held="a test hold")],
                    studies=[{"study": "tiny_a"}], held_out=[{"study": "tiny_b"}],
                    max_evaluations=30, loo_max_evaluations=2)
    out = tmp_path / "f.md"
    proc = ptolab("validate", cal, "--configs", configs, "--out", out)
    assert proc.returncode in (0, 1), proc.stderr
    text = out.read_text()
    figures = text.split("## Documented figures")[1].split("## Held-out cases")[0]
    assert "| free fit |" in figures and "'free fit': the fit with nothing held" in figures
    held_out = text.split("## Held-out cases")[1].split("## Parameters")[0]
    assert "free fit (predicted)" in held_out and ", free fit " in held_out

    def errors(section, case):
        row = next(line for line in section.splitlines() if line.startswith(f"| {case} |"))
        return [abs(float(e)) for e in re.findall(r"\(([+-][\d.]+) %\)", row)]

    # shipped, fresh fit (held at 0.5) and left out miss the 0.7 figures; the free fit meets them
    shipped, fresh, _, free = errors(figures, "tiny_a/small")
    assert free < 1.0 < min(shipped, fresh)
    shipped, fresh, free = errors(held_out, "tiny_b/mid")
    assert free < 1.0 < min(shipped, fresh)


def test_a_refit_cut_short_by_its_budget_is_named_in_the_verdict_and_its_table_row(tmp_path):
    """Leave-one-out refits solve the same problem as the fresh fit; one given a single
    evaluation stops where it starts, so what it 'predicts' is the priors.  The report says
    so for each such refit, and of the fresh fit, which had enough, says it converged."""
    configs = tiny_configs(tmp_path, documented_at(tmp_path / "t", {HEAD: 0.7}))
    cal = write_cal(tmp_path / "cal.yaml", [_param()], studies=[{"study": "tiny_a"}],
                    max_evaluations=40, loo_max_evaluations=1)
    out = tmp_path / "f.md"
    proc = ptolab("validate", cal, "--configs", configs, "--out", out)
    text = out.read_text()
    verdict = text.split("## Verdict")[1].split("## Documented figures")[0]
    short = [line for line in verdict.splitlines() if line.startswith("- NOT CONVERGED:")]
    assert len(short) == 2 and all("leave-one-out refit without tiny_a/" in s for s in short)
    assert "evaluations, converged, score" in text            # the fresh fit
    loo = text.split("## Leave-one-case-out")[1].split("## Physics checks")[0]
    assert loo.count("(budget, not converged)") == 2
    assert proc.stderr.count("not converged:") == 2
    # a fit cut short is named, not failed: the exit code is the FAIL lines' alone
    assert proc.returncode == (1 if "- FAIL:" in verdict else 0), proc.stderr
    # by default a refit gets the fresh fit's budget, and converges like it
    cal = write_cal(tmp_path / "cal2.yaml", [_param()], studies=[{"study": "tiny_a"}],
                    max_evaluations=40)
    ptolab("validate", cal, "--configs", configs, "--out", out)
    assert "NOT CONVERGED" not in out.read_text() and "not converged" not in out.read_text()


def test_the_leave_one_out_table_names_what_an_outlier_pins(tmp_path):
    """tiny_b/mid documents what a head overhead of 0.35 gives, the others 0.7: the fit on
    every case sits between, the refit without the outlier moves to 0.7, and the table's
    'moves most' names the head overhead, risen by more than 1.1x, in that row."""
    figures = documented_at(tmp_path / "t", {HEAD: 0.7})
    figures["tiny_b/mid"] = documented_at(tmp_path / "u", {HEAD: 0.35})["tiny_b/mid"]
    configs = tiny_configs(tmp_path, figures)
    cal = write_cal(tmp_path / "cal.yaml", [_param()], max_evaluations=40)
    out = tmp_path / "f.md"
    ptolab("validate", cal, "--configs", configs, "--out", out)
    loo = out.read_text().split("## Leave-one-case-out")[1].split("## Physics checks")[0]
    moved = {line.split("|")[1].strip(): line.rstrip(" |").rsplit("|", 1)[1].strip()
             for line in loo.splitlines() if line.startswith("| tiny_")}
    assert moved["tiny_b/mid"].startswith(f"`{HEAD}`"), moved
    ratio = float(moved["tiny_b/mid"].rsplit("(", 1)[1].rstrip("x)"))
    assert ratio > 1.1, moved


def test_a_leave_one_out_refit_on_a_bound_is_named_in_the_verdict(tmp_path):
    """Without the outlier tiny_b/mid (0.35) the other figures want a head overhead of 0.7,
    above the 0.6 its bounds allow: that refit ends on the bound, and the verdict names the
    refit, the parameter and the side, beside the table's row."""
    figures = documented_at(tmp_path / "t", {HEAD: 0.7})
    figures["tiny_b/mid"] = documented_at(tmp_path / "u", {HEAD: 0.35})["tiny_b/mid"]
    configs = tiny_configs(tmp_path, figures)
    cal = write_cal(tmp_path / "cal.yaml", [_param(low=0.25, high=0.6,
                                                   physical_bound="a test bound")],
                    max_evaluations=40)
    out = tmp_path / "f.md"
    ptolab("validate", cal, "--configs", configs, "--out", out)
    verdict = out.read_text().split("## Verdict")[1].split("## Documented figures")[0]
    bound = [line for line in verdict.splitlines() if line.startswith("- ON A BOUND:")]
    assert any("without tiny_b/mid" in line and HEAD in line and "high bound" in line
               for line in bound), verdict
    loo = out.read_text().split("## Leave-one-case-out")[1].split("## Physics checks")[0]
    row = next(line for line in loo.splitlines() if line.startswith("| tiny_b/mid |"))
    assert f"{HEAD} (high)" in row


def test_a_profile_figure_a_hardware_value_comes_from_is_marked_not_predicted(tmp_path):
    """When a hardware value was taken from a held-out case's profile figure (a pipe rate
    from its busy share), that figure still sits beside the model's, marked as the value's
    source for the stages named, so nobody reads the agreement as a prediction.  A figure
    validate does not compare, or a stage the study lacks, is refused up front."""
    figures = documented_at(tmp_path / "t", {HEAD: 0.7})
    figures["tiny_a/small"] |= {"aiv_vec_ratio": 0.3, "l2_hit_rate": 0.5}
    figures["tiny_a/big"] = {**figures["tiny_a/big"], "aiv_vec_ratio": 0.4}
    sourced = [{"figure": "aiv_vec_ratio", "stages": ["small"], "source": "a vector rate"}]
    problem = Problem(_cal(held_out=[{"study": "tiny_a", "sourced": sourced}],
                           studies=[{"study": "tiny_b"}]), tiny_configs(tmp_path, figures))
    small, big = problem.measure({HEAD: 0.7}, problem.held)
    checks = {(c["case"], c["figure"]): c for c in mechanism_checks([small, big])}
    assert checks["tiny_a/small", "aiv_vec_ratio"]["sourced"] == "a vector rate"
    assert "sourced" not in checks["tiny_a/small", "l2_hit_rate"]
    assert "sourced" not in checks["tiny_a/big", "aiv_vec_ratio"]     # another stage
    lines = _mechanism_section([small, big])
    marked = [line for line in lines if "source: a vector rate" in line]
    assert len(marked) == 1 and "tiny_a/small" in marked[0] and "AIV Vector busy" in marked[0]
    with pytest.raises(ValidationError, match="not a profile figure"):
        _cal(held_out=[{"study": "tiny_a", "sourced": [{"figure": "kernel_us", "source": "x y"}]}])
    with pytest.raises(ValidationError, match="held_out studies only"):
        _cal(studies=[{"study": "tiny_a", "sourced": sourced}])
    bad = [{"figure": "aiv_vec_ratio", "stages": ["huge"], "source": "a vector rate"}]
    with pytest.raises(ConfigError, match="no stage huge.*'sourced'"):
        Problem(_cal(held_out=[{"study": "tiny_a", "sourced": bad}],
                     studies=[{"study": "tiny_b"}]), tiny_configs(tmp_path / "b", figures)).held
