"""GM accesses keep their traced order, whatever the tiler merges or moves.

Random little kernels write and read a few GM temporaries: ops compute from the input, from
an earlier result or from a view of a temporary, and some results are assembled into a
temporary.  Merging ops into one leaf task, moving groups and the writes that ride in their
producer's task could make a read see a later write, or a write land before a read traced
ahead of it.  The simulated timeline must show neither: every read starts after the write
the trace gives it ends, and every write starts after the reads and the write traced before
it end (or shares their task, which copies in before it copies out).  A write the tiler gives a copy
task of its own (``RootCallTiler._late_copy``) is watched as that copy's.
"""
import random

import pytest

import simcore.compiler.tiling as tiling
from simcore.compiler import compile_kernel
from simcore.machine import simulate
from simcore.spec.hardware import load_hardware
from simcore.spec.errors import ConfigError
from simcore.spec.kernel import Kernel

HW = load_hardware("dav_2201")
UNARY = ["abs", "exp", "neg", "relu", "sqrt", "log", "rsqrt", "reciprocal"]
WHOLE = [32, 256]           # one tile a tensor: an op is one task, found by its name


def _kernel(rng: random.Random):
    """A random kernel and its GM accesses in trace order: ("read", op, buffer) for an op
    that reads a view of the buffer, ("write", op, buffer) for an assemble of its result.
    No op of the kernel is a copy: a copy task is one the tiler made for a write."""
    tensors = {"x": {"shape": WHOLE, "role": "input"}}
    buffers = [f"T{i}" for i in range(rng.randint(1, 3))]
    tensors.update({b: {"shape": WHOLE} for b in buffers})
    body, accesses, written, results, outputs = [{"set_vec_tile_shapes": WHOLE}], [], set(), [], 0

    def output(value):
        nonlocal outputs
        tensors[f"y{outputs}"] = {"shape": WHOLE, "role": "output"}
        body.append({"op": "assemble", "inputs": [value], "out": f"y{outputs}",
                     "offsets": [0, 0]})
        outputs += 1

    for k, name in enumerate(rng.sample(UNARY, rng.randint(3, len(UNARY)))):
        source = "x"
        if written and rng.random() < 0.6:
            buffer = rng.choice(sorted(written))
            body.append({"op": "view", "inputs": [buffer], "out": f"v{k}", "shape": WHOLE,
                         "offsets": [0, 0]})
            source = f"v{k}"
            accesses.append(("read", name, buffer))
        elif results and rng.random() < 0.3:
            source = rng.choice(results)
        body.append({"op": name, "inputs": [source], "out": f"r{k}"})
        results.append(f"r{k}")
        if rng.random() < 0.7:
            buffer = rng.choice(buffers)
            body.append({"op": "assemble", "inputs": [f"r{k}"], "out": buffer,
                         "offsets": [0, 0]})
            accesses.append(("write", name, buffer))
            written.add(buffer)
        else:
            output(f"r{k}")
    # every temporary reaches an output, so nothing is dead, and its last write is read:
    # a write landing before an earlier one shows there
    for buffer, final in zip(sorted(written), ("add", "sub", "mul")):
        body += [{"op": "view", "inputs": [buffer], "out": f"last{buffer}", "shape": WHOLE,
                  "offsets": [0, 0]},
                 {"op": final, "inputs": [f"last{buffer}", "x"], "out": f"c{buffer}"}]
        accesses.append(("read", final, buffer))
        output(f"c{buffer}")
    kernel = Kernel.model_validate({"name": "k", "tensors": tensors, "body": body})
    return kernel, accesses


def _violations(seed: int, monkeypatch) -> list[str]:
    kernel, accesses = _kernel(random.Random(seed))
    copied = []             # the values the tiler gave a copy task, in the order it made them
    late_copy = tiling.RootCallTiler._late_copy

    def watched(tiler, op, src):
        copied.append(op.inputs[0])
        return late_copy(tiler, op, src)
    monkeypatch.setattr(tiling.RootCallTiler, "_late_copy", watched)
    program = compile_kernel(kernel, HW)
    timeline = simulate(HW, program, kernel.options.runtime_options)
    start, end = timeline.task_start, timeline.task_end
    task_of, copies = {}, []
    for task, leaf in enumerate(program.task_leaf.tolist()):
        ops = program.leaf_functions[leaf].ops
        if ops == ("copy",):
            copies.append(task)
        for op in ops:
            task_of.setdefault(op, task)
    assert len(copies) == len(copied)
    producer = {s.out: s.op for s in kernel.body if getattr(s, "op", None) in UNARY}
    copy_of = {producer[value]: task for value, task in zip(copied, copies)}
    found, last_write, reads = [], {}, {}
    for kind, op, buffer in accesses:
        task = task_of[op]
        if kind == "read":
            writer = last_write.get(buffer)
            if writer is not None and writer != task and start[task] < end[writer]:
                found.append(f"{op} reads {buffer} before its write ends")
            reads.setdefault(buffer, []).append(task)
        else:
            task = copy_of.get(op, task)
            found += [f"{op}'s write of {buffer} starts before a read ends"
                      for reader in reads.get(buffer, [])
                      if reader != task and start[task] < end[reader]]
            writer = last_write.get(buffer)
            if writer is not None and writer != task and start[task] < end[writer]:
                found.append(f"{op}'s write of {buffer} starts before the one before it ends")
            last_write[buffer], reads[buffer] = task, []
    return found


@pytest.mark.parametrize("block", range(4))
def test_random_kernels_read_and_write_gm_in_traced_order(block, monkeypatch):
    """400 random kernels (seeds 0-399, in four blocks): no read and no write out of order.
    Before writes waited for earlier reads and writes, 13 of the first 300 had a write
    before an earlier read; with writes waiting for earlier reads only, 20 of the 400 had
    a write before an earlier write."""
    seeds = range(block * 100, (block + 1) * 100)
    assert {seed: v for seed in seeds if (v := _violations(seed, monkeypatch))} == {}


def test_a_write_that_cannot_move_gets_a_task_of_its_own():
    """The case that needs it: relu's result goes into T, neg reads T, and exp of relu's
    result (merged into relu's task, on chip) goes into T after that read.  Relu's task
    cannot run after neg, which needs its write, so exp's write goes out from a copy of
    its own, after neg has read."""
    t = {"x": {"shape": WHOLE, "role": "input"}, "T": {"shape": WHOLE},
         "y": {"shape": WHOLE, "role": "output"}, "z": {"shape": WHOLE, "role": "output"}}
    view = lambda out: {"op": "view", "inputs": ["T"], "out": out, "shape": WHOLE,
                        "offsets": [0, 0]}
    body = [{"set_vec_tile_shapes": WHOLE},
            {"op": "relu", "inputs": ["x"], "out": "a"},
            {"op": "assemble", "inputs": ["a"], "out": "T", "offsets": [0, 0]},
            view("v"), {"op": "neg", "inputs": ["v"], "out": "n"},
            {"op": "assemble", "inputs": ["n"], "out": "y", "offsets": [0, 0]},
            {"op": "exp", "inputs": ["a"], "out": "e"},
            {"op": "assemble", "inputs": ["e"], "out": "T", "offsets": [0, 0]},
            view("w"), {"op": "abs", "inputs": ["w"], "out": "b"},
            {"op": "assemble", "inputs": ["b"], "out": "z", "offsets": [0, 0]}]
    program = compile_kernel(Kernel.model_validate({"name": "k", "tensors": t, "body": body}),
                             HW)
    ops = [program.leaf_functions[i].ops for i in program.task_leaf]
    assert ops == [("relu", "exp"), ("neg",), ("copy",), ("abs",)]
    edges = set(zip(program.edge_src.tolist(), program.edge_dst.tolist()))
    assert {(0, 1), (1, 2), (2, 3)} <= edges      # write, read, the copy's write, read


def test_a_late_copy_of_a_view_reads_the_rows_it_views():
    """The value late-copied is a view of exp's result (its rows 32-64): the copy's tasks
    wait for exp's tasks that compute those rows, not for the ones of rows 0-32."""
    t = {"x": {"shape": [64, 256], "role": "input"}, "T": {"shape": WHOLE},
         "y": {"shape": WHOLE, "role": "output"}, "z": {"shape": WHOLE, "role": "output"}}
    view = lambda src, out, rows: {"op": "view", "inputs": [src], "out": out, "shape": WHOLE,
                                   "offsets": [rows, 0]}
    body = [{"set_vec_tile_shapes": [16, 256]},
            {"op": "relu", "inputs": ["x"], "out": "a"}, view("a", "a0", 0),
            {"op": "assemble", "inputs": ["a0"], "out": "T", "offsets": [0, 0]},
            view("T", "v", 0), {"op": "neg", "inputs": ["v"], "out": "n"},
            {"op": "assemble", "inputs": ["n"], "out": "y", "offsets": [0, 0]},
            {"op": "exp", "inputs": ["a"], "out": "e"}, view("e", "ev", 32),
            {"op": "assemble", "inputs": ["ev"], "out": "T", "offsets": [0, 0]},
            view("T", "w", 0), {"op": "abs", "inputs": ["w"], "out": "b"},
            {"op": "assemble", "inputs": ["b"], "out": "z", "offsets": [0, 0]}]
    program = compile_kernel(Kernel.model_validate({"name": "k", "tensors": t, "body": body}),
                             HW)
    ops = [program.leaf_functions[i].ops for i in program.task_leaf]
    producers = [i for i, o in enumerate(ops) if "exp" in o]      # rows 0-16, ..., 48-64
    copies = [i for i, o in enumerate(ops) if o == ("copy",)]
    assert len(producers) == 4 and len(copies) == 2
    preds = lambda task: set(program.edge_src[program.edge_dst == task].tolist())
    assert [preds(c) & set(producers) for c in copies] == [{producers[2]}, {producers[3]}]


def test_a_late_copy_needs_no_vector_tile_shape():
    """A kernel of matmuls alone sets no vector TileShape; a result written into T after a
    read of T still gets its copy task, tiled by upstream's default tile of a copy."""
    t = {"a": {"shape": [64, 256], "role": "input"}, "b": {"shape": [256, 256], "role": "input"},
         "T": {"shape": [64, 256]}, "y": {"shape": [64, 256], "role": "output"},
         "z": {"shape": [64, 256], "role": "output"}}
    mm = lambda a, out: {"op": "matmul", "inputs": [a, "b"], "out": out, "dtype": "fp32"}
    view = lambda out: {"op": "view", "inputs": ["T"], "out": out, "shape": [64, 256],
                        "offsets": [0, 0]}
    body = [{"set_cube_tile_shapes": {"m": [64, 64], "k": [64, 64], "n": [128, 128]}},
            mm("a", "c"), {"op": "assemble", "inputs": ["c"], "out": "T", "offsets": [0, 0]},
            view("v"), mm("v", "d"), {"op": "assemble", "inputs": ["d"], "out": "y",
                                      "offsets": [0, 0]},
            {"op": "assemble", "inputs": ["c"], "out": "T", "offsets": [0, 0]},
            view("w"), mm("w", "f"), {"op": "assemble", "inputs": ["f"], "out": "z",
                                      "offsets": [0, 0]}]
    program = compile_kernel(Kernel.model_validate({"name": "k", "tensors": t, "body": body}),
                             HW)
    ops = [program.leaf_functions[i].ops for i in program.task_leaf]
    assert ("copy",) in ops


def test_an_op_writing_rows_its_later_tiles_read_writes_through_a_copy():
    """``T[16:48] = abs(T[0:32])`` in tiles of 16 rows: abs's second tile reads T[16:32],
    which its first tile would write in the task before.  The result goes out from a copy
    after both tiles have read; with rows that no later tile reads (``T[32:64]``) it goes
    out from abs's own tasks."""
    t = {"x": {"shape": [64, 256], "role": "input"}, "T": {"shape": [64, 256]},
         "y": {"shape": [64, 256], "role": "output"}}

    def ops(rows):
        body = [{"set_vec_tile_shapes": [16, 256]},
                {"op": "relu", "inputs": ["x"], "out": "a"},
                {"op": "assemble", "inputs": ["a"], "out": "T", "offsets": [0, 0]},
                {"op": "view", "inputs": ["T"], "out": "v", "shape": [32, 256],
                 "offsets": [0, 0]},
                {"op": "abs", "inputs": ["v"], "out": "b"},
                {"op": "assemble", "inputs": ["b"], "out": "T", "offsets": [rows, 0]},
                {"op": "view", "inputs": ["T"], "out": "w", "shape": [64, 256],
                 "offsets": [0, 0]},
                {"op": "neg", "inputs": ["w"], "out": "n"},
                {"op": "assemble", "inputs": ["n"], "out": "y", "offsets": [0, 0]}]
        program = compile_kernel(Kernel.model_validate({"name": "k", "tensors": t,
                                                        "body": body}), HW)
        return [program.leaf_functions[i].ops for i in program.task_leaf]
    assert ops(16).count(("copy",)) == 2
    assert ops(32).count(("copy",)) == 0


def _compiled(tensors, body):
    program = compile_kernel(Kernel.model_validate({"name": "k", "tensors": tensors,
                                                    "body": body}), HW)
    return program, [program.leaf_functions[i].ops for i in program.task_leaf]


def test_a_read_through_another_geometry_counts_as_meeting_the_write():
    """abs reads T through an in-place reshape of it and writes T[16:48]: the boxes of the
    two geometries are not compared, so the write goes out from a copy; an aligned
    in-place update (T[:] = exp(T)) needs none."""
    t = {"x": {"shape": [64, 256], "role": "input"}, "T": {"shape": [64, 256]},
         "y": {"shape": [64, 256], "role": "output"}}
    head = [{"set_vec_tile_shapes": [16, 256]}, {"op": "relu", "inputs": ["x"], "out": "a"},
            {"op": "assemble", "inputs": ["a"], "out": "T", "offsets": [0, 0]}]
    tail = [{"op": "view", "inputs": ["T"], "out": "w", "shape": [64, 256], "offsets": [0, 0]},
            {"op": "neg", "inputs": ["w"], "out": "n"},
            {"op": "assemble", "inputs": ["n"], "out": "y", "offsets": [0, 0]}]
    reshaped = head + [
        {"op": "reshape", "inputs": ["T"], "out": "Tr", "shape": [64, 256], "inplace": True},
        {"op": "view", "inputs": ["Tr"], "out": "v", "shape": [32, 256], "offsets": [0, 0]},
        {"op": "abs", "inputs": ["v"], "out": "b"},
        {"op": "assemble", "inputs": ["b"], "out": "T", "offsets": [16, 0]}] + tail
    assert _compiled(t, reshaped)[1].count(("copy",)) == 2
    aligned = head + [
        {"op": "view", "inputs": ["T"], "out": "v", "shape": [64, 256], "offsets": [0, 0]},
        {"op": "exp", "inputs": ["v"], "out": "b"},
        {"op": "assemble", "inputs": ["b"], "out": "T", "offsets": [0, 0]}] + tail
    assert _compiled(t, aligned)[1].count(("copy",)) == 0


def test_a_group_moved_ahead_still_waits_for_the_reads_it_passed():
    """neg reads T; relu, a source-only op traced later, moves ahead of exp's group (which
    add joins) and so ahead of neg's; relu's result then goes into T: neg must read T
    before relu's tasks write it."""
    t = {"x": {"shape": [32, 256], "role": "input"}, "x2": {"shape": [32, 256], "role": "input"},
         "T": {"shape": [32, 256], "role": "input"},
         "y": {"shape": [32, 256], "role": "output"}, "z": {"shape": [32, 256], "role": "output"}}
    body = [{"set_vec_tile_shapes": [16, 256]},
            {"op": "exp", "inputs": ["x"], "out": "a"},
            {"op": "view", "inputs": ["T"], "out": "tv", "shape": [32, 256], "offsets": [0, 0]},
            {"op": "neg", "inputs": ["tv"], "out": "n"},
            {"op": "assemble", "inputs": ["n"], "out": "y", "offsets": [0, 0]},
            {"set_vec_tile_shapes": [8, 256]},
            {"op": "relu", "inputs": ["x2"], "out": "s"},
            {"set_vec_tile_shapes": [16, 256]},
            {"op": "add", "inputs": ["a", "s"], "out": "r"},
            {"op": "assemble", "inputs": ["r"], "out": "z", "offsets": [0, 0]},
            {"op": "assemble", "inputs": ["s"], "out": "T", "offsets": [0, 0]}]
    program, ops = _compiled(t, body)
    negs = [k for k, o in enumerate(ops) if o == ("neg",)]
    relus = [k for k, o in enumerate(ops) if "relu" in o]
    assert max(negs) < min(relus)
    edges = set(zip(program.edge_src.tolist(), program.edge_dst.tolist()))
    assert all(any((n, r) in edges for n in negs) for r in relus)


def test_one_task_scopes_and_bad_offsets_need_no_copy():
    """A scope that runs all its tiles in one task reads before it writes; an assemble
    with offsets of the wrong rank still stops with the kernel-language error."""
    t = {"x": {"shape": [64, 256], "role": "input"}, "T": {"shape": [64, 256]},
         "y": {"shape": [64, 256], "role": "output"}}
    body = [{"set_vec_tile_shapes": [16, 256]}, {"op": "relu", "inputs": ["x"], "out": "a"},
            {"op": "assemble", "inputs": ["a"], "out": "T", "offsets": [0, 0]},
            {"sg_set_scope": [1, True, False]},
            {"op": "view", "inputs": ["T"], "out": "v", "shape": [32, 256], "offsets": [0, 0]},
            {"op": "abs", "inputs": ["v"], "out": "b"},
            {"op": "assemble", "inputs": ["b"], "out": "T", "offsets": [16, 0]},
            {"sg_set_scope": -1},
            {"op": "view", "inputs": ["T"], "out": "w", "shape": [64, 256], "offsets": [0, 0]},
            {"op": "neg", "inputs": ["w"], "out": "n"},
            {"op": "assemble", "inputs": ["n"], "out": "y", "offsets": [0, 0]}]
    assert _compiled(t, body)[1].count(("copy",)) == 0
    bad = body[:6] + [{"op": "assemble", "inputs": ["b"], "out": "T", "offsets": [16, 0, 0]}]
    with pytest.raises(ConfigError, match="one entry per dim"):
        _compiled(t, bad)
