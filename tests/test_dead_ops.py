"""Ops whose results reach no output cost nothing, as upstream's dead-operation sweep
makes them (simcore/compiler/deadops.py); everything a root function hands on stays."""
import yaml

from simcore.compiler import compile_kernel
from simcore.spec.hardware import load_hardware
from simcore.spec.kernel import Kernel

from pipeline.cli import main

HW = load_hardware("dav_2201")
IO = {"x": {"shape": [64, 64], "role": "input"}, "y": {"shape": [64, 64], "role": "output"}}


def kernel(body, tensors=IO):
    return Kernel.model_validate({"name": "k", "tensors": tensors, "body": body})


def program(body, tensors=IO):
    return compile_kernel(kernel(body, tensors), HW)


TILE = {"set_vec_tile_shapes": [32, 32]}
ADD_TO_Y = [{"op": "add", "inputs": ["x", "x"], "out": "s"},
            {"op": "assemble", "inputs": ["s"], "out": "y", "offsets": [0, 0]}]


def test_an_unused_result_costs_nothing():
    """``unused = exp(x)`` beside ``y = x + x``: the same tasks as without the line, and
    the compiler names the line it dropped."""
    live = program([TILE, *ADD_TO_Y])
    dead = program([TILE, {"op": "exp", "inputs": ["x"], "out": "unused"}, *ADD_TO_Y])
    assert dead.leaf_tasks == live.leaf_tasks == 4
    assert [ops for ops in map(lambda f: f.ops, dead.leaf_functions)] == \
        [ops for ops in map(lambda f: f.ops, live.leaf_functions)]
    assert dead.info["dead_ops"] == ["body[1]"]
    assert "dead_ops" not in live.info


def test_a_chain_that_feeds_only_dead_ops_goes_with_them():
    """exp -> sqrt -> (nothing): both go; exp -> sqrt -> y: both stay."""
    chain = [{"op": "exp", "inputs": ["x"], "out": "e"},
             {"op": "sqrt", "inputs": ["e"], "out": "r"}]
    dead = program([TILE, *chain, *ADD_TO_Y])
    assert dead.info["dead_ops"] == ["body[1]", "body[2]"] and dead.leaf_tasks == 4
    used = program([TILE, *chain, {"op": "assemble", "inputs": ["r"], "out": "y",
                                   "offsets": [0, 0]}])
    assert "dead_ops" not in used.info and used.leaf_tasks == 4
    assert {"exp", "sqrt"} <= {op for f in used.leaf_functions for op in f.ops}


def test_a_write_through_an_inplace_reshape_of_an_output_stays():
    """The assemble names the reshape, not the output; the bytes are the output's."""
    t = {"x": {"shape": [64, 64], "role": "input"}, "y": {"shape": [64, 64], "role": "output"}}
    body = [TILE,
            {"op": "reshape", "inputs": ["y"], "out": "y2", "shape": [128, 32], "inplace": True},
            {"op": "reshape", "inputs": ["x"], "out": "x2", "shape": [128, 32], "inplace": True},
            {"op": "exp", "inputs": ["x2"], "out": "e"},
            {"op": "assemble", "inputs": ["e"], "out": "y2", "offsets": [0, 0]}]
    p = program(body, t)
    assert "dead_ops" not in p.info and p.leaf_tasks == 4


def _loop(body, trip=4):
    return {"loop": {"name": "L", "idx": "i", "trip": trip}, "body": body}


def test_a_declared_tensor_stays_a_per_iteration_one_dies_with_its_iteration():
    """Writes to a tensor the kernel declares stay, read or not (a hand-written file may
    leave its result's role at the default); a tensor made inside the loop body
    (fresh_per) that nothing reads dies with each iteration, and with it the op that
    filled it, unless the code after the loop reads the last one."""
    def with_scratch(fresh, read_after=False):
        spec = {"shape": [64, 64]}
        if fresh:
            spec["fresh_per"] = "L"
        body = [TILE, _loop([{"op": "exp", "inputs": ["x"], "out": "e"},
                             {"op": "assemble", "inputs": ["e"], "out": "scratch",
                              "offsets": [0, 0]},
                             {"op": "add", "inputs": ["x", "x"], "out": "s"},
                             {"op": "assemble", "inputs": ["s"], "out": "y",
                              "offsets": [0, 0]}])]
        if read_after:
            body.append({"op": "sqrt", "inputs": ["scratch"], "out": "r"})
            body.append({"op": "assemble", "inputs": ["r"], "out": "y", "offsets": [0, 0]})
        return program(body, {**IO, "scratch": spec})
    read_after = with_scratch(True, read_after=True)
    assert "dead_ops" not in read_after.info
    assert read_after.leaf_tasks == 4 * 8 + 4
    kept, fresh = with_scratch(False), with_scratch(True)
    assert "dead_ops" not in kept.info
    assert fresh.info["dead_ops"] == ["body[1].body[0]", "body[1].body[1]"]
    assert fresh.leaf_tasks * 2 == kept.leaf_tasks


def test_the_command_says_which_lines_it_dropped(tmp_path, capsys):
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump({
        "name": "k", "tensors": IO,
        "body": [TILE, {"op": "exp", "inputs": ["x"], "out": "unused"}, *ADD_TO_Y]}))
    assert main(["compile", str(path), "--out", str(tmp_path / "c")]) == 0
    err = capsys.readouterr().err
    notes = [line for line in err.splitlines() if line.startswith("ptolab: note:")]
    assert len(notes) == 1 and "1 op(s)" in notes[0] and "body[1]" in notes[0]


def test_a_kernel_that_writes_no_declared_tensor_is_refused_with_what_to_do(tmp_path, capsys):
    """Every op dead means nothing would run: the kernel never stores its result."""
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump({
        "name": "k", "tensors": {"x": IO["x"]},
        "body": [TILE, {"op": "exp", "inputs": ["x"], "out": "e"}]}))
    assert main(["compile", str(path), "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "role: output" in err
    assert not (tmp_path / "c").exists()


def test_a_running_value_nothing_stores_is_dead_though_each_step_reads_the_last():
    """A Python for that updates a value every step and never stores it: every step but
    the first reads the step before, yet nothing reaches an output."""
    body = [TILE, {"op": "exp", "inputs": ["x"], "out": "run"},
            {"loop": {"name": "steps", "idx": "i", "trip": 3, "style": "for"},
             "body": [{"op": "add", "inputs": ["run", "x"], "out": "run"}]},
            *ADD_TO_Y]
    p = program(body)
    assert p.info["dead_ops"] == ["body[1]", "body[2].body[0]"]
    assert p.leaf_tasks == 4


def test_a_statement_kept_for_one_call_keeps_its_producer_in_every_call():
    """Calls of one loop hold different ops under a cond: m = x * 2 on the first step,
    m = x * 3 on the others, t = m + 1 on every step, stored on the last.  t's statement is
    live in the last call, so it stays in all calls, and with it whichever m fed it."""
    body = [TILE, _loop([
        {"op": "mul", "inputs": ["x"], "scalar": 2.0, "out": "m", "cond": "i == 0"},
        {"op": "mul", "inputs": ["x"], "scalar": 3.0, "out": "m", "cond": "i != 0"},
        {"op": "add", "inputs": ["m"], "scalar": 1.0, "out": "t"},
        {"op": "assemble", "inputs": ["t"], "out": "y", "offsets": [0, 0], "cond": "i == 2"},
    ], trip=3)]
    p = program(body)
    assert "dead_ops" not in p.info
    assert p.root_calls == 3 and p.leaf_tasks == 3 * 4
