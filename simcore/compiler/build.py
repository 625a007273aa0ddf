"""Kernel + options + hardware -> Program: trace, tile, merge, link, stitch."""
from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np

from ..spec.hardware import Hardware
from ..spec.kernel import Kernel
from .accesses import Accesses, GmBuffer, used_rank
from .callcache import CallCache, call_key
from .deadops import drop_dead_ops
from .deps import region_edges
from .encode import encode_call_edges, end_hubs
from .gcpace import slower_young_collections
from .groupcache import moved_boxes
from .limits import Limits
from .merge import choose, merged_index, vec_merge_count, vec_merge_mode
from .mergeorder import (Ancestry, auto_vec_merge_count, merged_order, sibling_groups,
                         sibling_merge, split_dependent)
from .program import (L2_LINE_BYTES, CallOperands, CoreType, LeafFunction, Program,
                      RegionAccesses, RootFunction)
from .rows import distinct_row_ids, row_ids
from .stitch import stitch
from .tiling import RootCallTiler, TaskBatch
from .trace import trace
from .work import Work


def stable_hash(*parts) -> int:
    """A deterministic 63-bit hash (Python's hash() is salted per process)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@dataclass
class _Leaves:
    """Leaf functions, registered per root function in order of first appearance.

    A leaf function's hashOrder counts the leaf functions of its core type before it in its
    root function: upstream numbers the subgraphs that copy GM into L1 for the Cube merges
    (``GetColorHash`` in l1_copy_reuse.cpp) and the others for vecNBuffer
    (n_buffer_merge.cpp), each from 0, so an int key of cube_l1_reuse_setting names the
    n-th Cube group and one of vec_nbuffer_setting the n-th Vector group."""
    kernel: str
    by_key: dict = field(default_factory=dict)
    items: list = field(default_factory=list)
    orders: dict = field(default_factory=dict)

    def get(self, root: int, signature, core: int, label: str, info=(), order=None,
            ops=(), op_shapes=(), srcs=()) -> int:
        key = (root, signature)
        if key not in self.by_key:
            if order is None:
                order = self.orders.get((root, core), 0)
                self.orders[(root, core)] = order + 1
            self.by_key[key] = len(self.items)
            self.items.append(LeafFunction(
                index=len(self.items), hash=stable_hash(self.kernel, root, signature),
                name=f"{self.kernel}_leaf{len(self.items)}", core_type=core, label=label,
                root=root, order=order, merge_info=tuple(info), ops=tuple(ops),
                op_shapes=tuple(op_shapes), srcs=tuple(srcs)))
        return self.by_key[key]


@dataclass
class _CallTasks:
    """The leaf tasks of one root call."""
    core: np.ndarray
    leaf: np.ndarray
    work: Work
    acc: Accesses
    # per leaf function whose merge setting asked to merge tasks that wait on each other:
    # (its function key, core type, tasks more than the setting asked for)
    held_apart: tuple = ()


def _flatten(batches: list[TaskBatch], leaves: _Leaves, root: int) -> _CallTasks:
    leaf_ids = []
    # batches of one cached group share their signature table (groupcache.py): its leaf
    # functions are registered by the first, and ``_Leaves.get`` gives the rest the same
    known: dict[int, np.ndarray] = {}
    for b in batches:
        ids = known.get(id(b.sig_table))
        if ids is None:
            ids = known[id(b.sig_table)] = np.asarray(
                [leaves.get(root, sig, b.core, b.label, ops=tuple(node[0] for node in sig[0]),
                            op_shapes=sig[3], srcs=b.srcs) for sig in b.sig_table], np.int64)
        leaf_ids.append(ids[b.sig_index] if b.size else np.zeros(0, np.int64))
    offsets = np.cumsum([0] + [b.size for b in batches])[:-1]
    # a call of only views and reshapes has no leaf task
    cores = [np.full(b.size, int(b.core), np.int64) for b in batches] or [np.zeros(0, np.int64)]
    acc = Accesses.concat([b.accesses for b in batches], offsets)
    moved_boxes(acc, batches)
    return _CallTasks(np.concatenate(cores), np.concatenate(leaf_ids or [np.zeros(0, np.int64)]),
                      Work.concat([b.work for b in batches]), acc)


def _read_bytes(t: _CallTasks) -> np.ndarray:
    """Per task of the call, the bytes it reads from GM: for a Cube task, what it copies
    into L1 (upstream's per-subgraph ``GetCopyIn`` in l1_copy_reuse.cpp, which
    mg_copyin_upper_bound bounds)."""
    reads = ~t.acc.write
    return np.bincount(t.acc.task[reads], weights=t.acc.bytes[reads],
                       minlength=t.core.size).astype(np.int64)


def _merge_cap(count: int, member_bytes: int, bound: int) -> int:
    """How many L1Reuse groups one CubeNBuffer merge takes: ``count``, as far as
    mg_copyin_upper_bound lets their summed GM -> L1 copies go; a group copying in more than
    the bound merges nothing (upstream's ``CubeMergeProcess`` at 08cec41e4 and 883e7dfb; at
    the guides' commit the bound was 2 MiB).  L1Reuse checks the bound join by join
    (``_l1_reuse_groups``)."""
    if member_bytes > bound:
        return 1
    return max(1, min(count, bound // member_bytes)) if member_bytes else max(count, 1)


def _auto_l1_reuse_count(group: int, cube_order: int, vector_groups: int,
                         limits: Limits) -> int:
    """Upstream's automatic L1Reuse count (``GetL1ReuseOpOrder``): a group's subgraphs
    over twice the AIC cores, rounded down.  Its count of the group reads the hashOrder of
    every subgraph of the function, and a subgraph with none (one that copies nothing
    into L1: every Vector subgraph, as vecNBuffer left them) reads as hashOrder 0, so the
    first Cube group counts the Vector subgraphs too.  (It also keeps the remainder, for
    merged subgraphs that may take one more, but stores it under the hashOrder and reads it
    under the subgraph's hash (``GetMergedL1``, at 08cec41e4 and 883e7dfb), so it never
    applies.)"""
    if cube_order == 0:
        group += vector_groups
    return group // (2 * limits.aic_cores)


def _l1_reuse_groups(t: _CallTasks, idx: np.ndarray, count: int, side: str,
                     copy_in: np.ndarray, bound: int) -> np.ndarray:
    """Per task of ``idx`` (one isomorphic Cube group, in task order), its L1Reuse group, as
    upstream's ``ProcessL1ReuseCandidates`` (l1_copy_reuse.cpp, alike at 08cec41e4 and
    883e7dfb) forms them: a task joins the group that last loaded any one of its L1
    copy-ins (the first such copy-in in the task's order; only those of one side when
    ``side`` names one) if that group holds fewer than ``count`` tasks and their copy-ins
    together stay within mg_copyin_upper_bound; either way the task's copy-ins then name its
    group.  So tasks in a row share their A block, and a row shorter than the count also
    takes the next row's tasks that share its B blocks (a 2-D block of tiles)."""
    n = idx.size
    group = np.arange(n)
    if n < 2 or count < 2:
        return group
    a = t.acc
    pick = ~a.write & np.isin(a.task, idx)
    if side in ("left", "right"):
        pick &= a.operand == (0 if side == "left" else 1)
    rows = np.flatnonzero(pick)
    box = np.concatenate([a.buffer[rows, None], a.lo[rows], a.hi[rows]], axis=1)
    feature = distinct_row_ids(box)[0].tolist()
    position = np.full(t.core.size, -1, np.int64)
    position[idx] = np.arange(n)
    features: list[list[int]] = [[] for _ in range(n)]
    for pos, f in zip(position[a.task[rows]].tolist(), feature):
        features[pos].append(f)
    size = [1] * n
    load = [int(b) for b in copy_in]
    owner: dict[int, int] = {}
    for j in range(n):
        target = j
        if load[j] <= bound:
            target = next((g for g in map(owner.get, features[j]) if g is not None
                           and size[g] < count and load[g] + load[j] <= bound), j)
        for f in features[j]:
            owner[f] = target
        if target != j:
            group[j] = target
            size[target] += 1
            load[target] += load[j]
    return merged_index(group)


def _vec_merge(t: _CallTasks, idx: np.ndarray, meta: LeafFunction, po,
               ancestry: Ancestry | None):
    """A Vector leaf function's merge as upstream's vecNBuffer makes it: (per task its
    merged group, whether the automatic count chose it, the swimlane hint), and the call's
    dependencies if this or an earlier merge needed them.  The count its
    setting gives, or the automatic one (as many tasks a merged task as keeps the group on
    mg_vec_parallel_lb cores); merged over the whole function in task order, or only among
    tasks that read from or feed the same task (merge.vec_merge_mode)."""
    setting = po.vec_nbuffer_setting
    mode = vec_merge_mode(setting)
    labels = {meta.label} if meta.label else set()
    choice = vec_merge_count(setting, meta.order, meta.hash_order, labels,
                             auto_vec_merge_count(idx.size, po.mg_vec_parallel_lb))
    n = 1 if mode == "none" else choice.count
    sub = np.arange(idx.size)
    if n > 1 and mode == "siblings":
        ancestry = ancestry or Ancestry(t.acc, t.core.size)
        sub = sibling_merge(sibling_groups(idx, ancestry), idx.size, n)
    elif n > 1:
        sub = sub // n
    info = [f"vecMergeInfo hashOrder: {meta.hash_order}, subGraphCount: {idx.size}"] \
        if sub.size and np.unique(sub).size < sub.size else []
    return (sub, choice.source == "auto", info), ancestry


def _cube_nbuffer_groups(l1_group: np.ndarray, nbuffer, member_bytes: int, bound: int,
                         aic_cores: int) -> np.ndarray:
    """Per task, its CubeNBuffer group: ``nbuffer.count`` L1Reuse groups a task in order,
    or, where no key gives a count (an empty setting, int keys not naming the group,
    labels alone: upstream's default {-1: 1} then no longer applies), upstream's
    automatic partition (``auto_nbuffer_starts``)."""
    if nbuffer.source != "auto":
        return l1_group // _merge_cap(nbuffer.count, member_bytes, bound)
    if member_bytes > bound:
        return l1_group
    groups = int(l1_group.max()) + 1 if l1_group.size else 0
    most = bound // member_bytes if member_bytes else groups
    starts = auto_nbuffer_starts(groups, aic_cores, max(most, 1))
    return (np.cumsum(starts) - 1)[l1_group]


def auto_nbuffer_starts(n: int, aic_cores: int, most: int) -> np.ndarray:
    """Which of ``n`` isomorphic Cube subgraphs start a merged one, the rest joining the one
    before, as upstream's ``AdjustNumDBCore`` (l1_copy_reuse.cpp, 08cec41e4 and 883e7dfb)
    chooses with no count set: up to (``most`` + 1) x cores subgraphs spread over twice
    the cores, more in runs of ``most`` with the remainder spread over the cores."""
    starts = np.zeros(n, bool)
    cores, rest = aic_cores, n % (most * aic_cores)
    if n <= (most + 1) * aic_cores:
        cores, rest = 2 * aic_cores, n
    else:
        starts[0:n - rest:most] = True
    for i in range(rest % cores):
        starts[n - rest + i * ((rest + cores - 1) // cores)] = True
    if rest >= cores:
        for i in range(1, cores + 1 - rest % cores):
            starts[n - i * (rest // cores)] = True
    if n:
        starts[0] = True
    return starts


def _breadth_merge(t: _CallTasks, leaves: _Leaves, root: int, kernel: Kernel,
                   limits: Limits) -> np.ndarray:
    """New task index for every task of the call."""
    po = kernel.options.pass_options
    group = np.zeros(t.core.size, np.int64)
    new_leaf = []      # per leaf function: (leaf id, its new groups, their sizes, merge info)
    next_group = 0
    ancestry = None    # the call's dependencies, once a merge needs them (mergeorder.py)
    # the tasks of every leaf function, in task order, without a scan per leaf function
    by_leaf = np.argsort(t.leaf, kind="stable")
    leaf_ids, first, counts = np.unique(t.leaf, return_index=True, return_counts=True)
    tasks_of = dict(zip(leaf_ids.tolist(), np.split(by_leaf, np.cumsum(counts)[:-1])))
    in_order = t.leaf[np.sort(first)]
    # upstream's NBufferMerge runs before L1CopyInReuseMerge, whose automatic count sees
    # the Vector subgraphs as merged
    vector = {}
    for leaf_id in in_order:
        if leaves.items[leaf_id].core_type != CoreType.AIC:
            vector[int(leaf_id)], ancestry = _vec_merge(
                t, tasks_of[int(leaf_id)], leaves.items[leaf_id], po, ancestry)
    vector_groups = sum(int(np.unique(sub).size) for sub, _, _ in vector.values())
    read_bytes = None   # per task, once a Cube leaf function needs it
    for leaf_id in in_order:
        idx = tasks_of[int(leaf_id)]
        meta = leaves.items[leaf_id]
        labels = {meta.label} if meta.label else set()
        func_key = meta.hash_order
        info = []
        if meta.core_type == CoreType.AIC:
            l1 = choose(po.cube_l1_reuse_setting, meta.order, func_key, labels,
                        _auto_l1_reuse_count(idx.size, meta.order, vector_groups, limits))
            read_bytes = _read_bytes(t) if read_bytes is None else read_bytes
            copy_in = read_bytes[idx]
            l1_group = _l1_reuse_groups(t, idx, l1.count, l1.side, copy_in,
                                        po.mg_copyin_upper_bound)
            group_bytes = np.bincount(l1_group, weights=copy_in)
            l1_merged = group_bytes.size < idx.size
            nbuffer = choose(po.cube_nbuffer_setting, meta.order, func_key, labels, None)
            sub = _cube_nbuffer_groups(l1_group, nbuffer, int(group_bytes.max()),
                                       po.mg_copyin_upper_bound, limits.aic_cores)
            merged = np.unique(sub).size < sub.size
            # merged by counts nobody set: L1Reuse's own, CubeNBuffer's
            automatic = (not l1_merged or l1.source == "auto") and \
                (not merged or nbuffer.source == "auto")
            if l1_merged:
                info.append(f"l1ReuseInfo hashOrder: {func_key}, subGraphCount: {idx.size}")
            if merged:
                info.append(f"cubeMergeInfo hashOrder: {func_key}, subGraphCount: {idx.size}")
        else:
            sub, automatic, info = vector[int(leaf_id)]
        asked = np.unique(sub).size
        if sub.size and int(np.bincount(sub).max()) > 1:
            # tasks that wait on one another stay apart
            ancestry = ancestry or Ancestry(t.acc, t.core.size)
            sub = split_dependent(sub, idx, ancestry)
        group[idx] = next_group + sub
        new_leaf.append((leaf_id, idx, tuple(info), asked, automatic))
        next_group += int(sub.max()) + 1
    group, order = merged_order(group, ancestry)
    held_apart = []
    for k, (leaf_id, idx, info, asked, automatic) in enumerate(new_leaf):
        groups, sizes = np.unique(group[idx], return_counts=True)
        new_leaf[k] = (leaf_id, groups, sizes, info)
        if groups.size > asked:
            meta = leaves.items[leaf_id]
            held_apart.append((meta.hash_order, CoreType(meta.core_type).name,
                               groups.size - asked, automatic))
    t.held_apart = tuple(held_apart)
    # the leaf function of every new group: a merged one per (leaf function, tasks merged),
    # registered in group order as a loop over the groups would
    lids = []
    for leaf_id, _, size, info in new_leaf:
        meta = leaves.items[leaf_id]
        lid = np.full(size.size, leaf_id, np.int64)
        merged = np.ones(size.size, bool) if info else size != 1
        values, at = np.unique(size[merged], return_index=True)
        for value in values[np.argsort(at)]:
            lid[merged & (size == value)] = leaves.get(
                root, ("merged", leaf_id, int(value)), meta.core_type, meta.label, info,
                order=meta.order, ops=meta.ops, op_shapes=meta.op_shapes, srcs=meta.srcs)
        lids.append(lid)
    t.merged_leaf = (np.concatenate([g for _, g, _, _ in new_leaf]), np.concatenate(lids))
    return group, order


def _apply_merge(t: _CallTasks, group: np.ndarray,
                 order: np.ndarray) -> tuple[_CallTasks, np.ndarray]:
    """The merged tasks, and per access row they keep its row in ``t``."""
    n = int(order.max()) + 1 if order.size else 0
    new_of_group = np.zeros(int(group.max()) + 1 if group.size else 0, np.int64)
    new_of_group[group] = order
    core = np.zeros(n, np.int64)
    core[order] = t.core
    leaf = np.zeros(n, np.int64)
    merged_groups, merged_leaves = t.merged_leaf
    leaf[new_of_group[merged_groups]] = merged_leaves
    acc = t.acc.moved(order)
    reads_per_task = np.bincount(acc.task[~acc.write], minlength=n) if n else [0]
    kept = np.arange(acc.size)
    if acc.size and np.max(reads_per_task) > 1:
        # a task loads a block once however many of its ops or merged tiles read it
        # (the point of L1Reuse and of merging ops that share an input)
        rows = np.concatenate([acc.task[:, None], acc.buffer[:, None], acc.lo, acc.hi,
                               acc.write[:, None].astype(np.int64), acc.tag[:, None]], axis=1)
        kept = np.sort(row_ids(rows)[1])
        acc = acc.take(kept)
    return _CallTasks(core, leaf, _with_loads(t.work.merged(order, n), acc), acc,
                      t.held_apart), kept


def _with_loads(work: Work, acc: Accesses) -> Work:
    """The MTE2 columns of ``work``: what each task reads, once per GM box, in the copies
    each box takes (a matmul operand's K pieces, tiling._k_block)."""
    n = work.tasks
    reads = ~acc.write
    task = acc.task[reads]
    nbytes = acc.bytes[reads]
    mte2_bytes, mte2_bursts, mte2_loads = np.zeros(n), np.zeros(n), np.zeros(n)
    np.add.at(mte2_bytes, task, nbytes)
    np.add.at(mte2_loads, task, acc.pieces[reads])
    np.add.at(mte2_bursts, task, np.ceil(nbytes / acc.burst[reads]))
    return replace(work, mte2_bytes=mte2_bytes, mte2_bursts=mte2_bursts, mte2_loads=mte2_loads)


def _used_leaves(task_leaf: np.ndarray, items: list[LeafFunction]):
    """Drop leaf functions that breadth merge replaced everywhere; renumber the rest."""
    used = np.unique(task_leaf)
    renumber = np.full(len(items), -1, np.int64)
    renumber[used] = np.arange(used.size)
    kept = [replace(items[i], index=int(renumber[i]), name=f"{items[i].name.rsplit('_leaf', 1)[0]}"
                    f"_leaf{int(renumber[i])}") for i in used]
    return renumber[task_leaf] if task_leaf.size else task_leaf, kept


def compile_kernel(kernel: Kernel, hw: Hardware) -> Program:
    """The task graph of ``kernel``; of ``hw`` only its Limits shape the mapping."""
    with slower_young_collections():
        return _compile(kernel, hw)


def _compile(kernel: Kernel, hw: Hardware) -> Program:
    limits = Limits.of(hw)
    traced, dead = drop_dead_ops(trace(kernel), kernel)
    roots: dict[str, RootFunction] = {}
    leaves = _Leaves(kernel.name)
    calls, call_root, call_bodies, workspace = [], [], [], []
    cache = CallCache()
    held_apart: Counter = Counter()
    # only calls of one root function can be shaped alike: a root called once needs no key
    calls_of = Counter(call.root_key for call in traced.calls)
    for c, call in enumerate(traced.calls):
        root = roots.setdefault(call.root_key, RootFunction(
            index=len(roots), hash=stable_hash(kernel.name, call.root_key), name=call.root_key))
        key = call_key(call) if calls_of[call.root_key] > 1 else None
        reused = cache.take(key, kernel, limits, call, c)
        if reused is not None:
            tasks, ws_bytes = reused
        else:
            tiler = RootCallTiler(kernel, limits, call, c)
            tasks = _flatten(tiler.run(), leaves, root.index)
            pre, kept = tasks.acc, np.arange(tasks.acc.size)
            if tasks.core.size:
                tasks, kept = _apply_merge(tasks, *_breadth_merge(tasks, leaves, root.index,
                                                                  kernel, limits))
            ws_bytes = tiler.workspace_bytes()
            cache.store(key, call, c, tiler, pre, tasks, kept)
        calls.append(tasks)
        call_root.append(root.index)
        call_bodies.append(call.bodies)
        workspace.append(ws_bytes)
        for function, core, extra, automatic in tasks.held_apart:
            held_apart[(function, core, automatic)] += extra
    program = _assemble(kernel, traced, calls, call_root, call_bodies, workspace, roots, leaves)
    if dead:
        program.info["dead_ops"] = dead      # pipeline.runner notes them
    if held_apart:
        # pipeline.merge_keys notes them: merges upstream would refuse, asked for by a
        # setting or by the automatic count (the last field)
        program.info["merges_held_apart"] = sorted((f, c, n, a)
                                                   for (f, c, a), n in held_apart.items())
    return program


# a workspace the compiler made has no declared dtype: the common one of its element size
_DTYPE_OF_BYTES = {1: "int8", 2: "fp16", 4: "fp32", 8: "int64"}


def _with_operands(root: RootFunction, first: int | None, starts: np.ndarray,
                   row_starts: np.ndarray, acc: Accesses) -> RootFunction:
    """``root`` with the GM operands of the ops of its ``first`` call (program.json
    describes a root function by one of its calls, as a root function of upstream's is one
    graph)."""
    if first is None:
        return root
    rows = slice(int(row_starts[first]), int(row_starts[first + 1]))
    used, tensor = np.unique(acc.buffer[rows], return_inverse=True)
    buffers = [acc.buffers[int(b)] for b in used]
    rank = max([len(b.shape) for b in buffers] + [1])
    # copies: a view would keep the whole kernel's access arrays alive with the Program
    operands = CallOperands(
        tensors=tuple((b.name, tuple(b.shape), b.dtype or _DTYPE_OF_BYTES.get(b.elem, ""))
                      for b in buffers),
        op=acc.task[rows] - int(starts[first]), tensor=tensor.ravel(),
        write=acc.write[rows].astype(bool), lo=acc.lo[rows, :rank].copy(),
        hi=acc.hi[rows, :rank].copy())
    return replace(root, operands=operands)


# L2 tracks data by region of this many bytes, each a bitmap of its L2 lines: 64 lines fit
# one uint64, and a region is the unit L2 evicts (far below any capacity in lines)
L2_REGION_BYTES = 64 * L2_LINE_BYTES


def l2_regions(acc: Accesses) -> RegionAccesses:
    """Expand accesses into the L2 regions, and the lines in them, their bytes cover.

    A box of a row-major buffer is one contiguous run of bytes per row of its outer
    dimensions (the inner dimensions it covers whole join the run); each run touches
    a range of lines.  A tile of one op and a differently shaped tile of another op
    that touch the same bytes then meet in the same lines, so a consumer with other
    tiles still hits, and a column tile marks only the lines of its own columns.
    Many tasks read the same box (a matmul's panels), so each distinct box is cut once.
    """
    if not acc.size:
        return RegionAccesses.empty()
    buffers, lo, hi = fractal_boxes(acc)
    # unused trailing dims cut nothing: per-box temporaries only as wide as the buffers
    rank = used_rank(buffers, lo, hi)
    boxes = np.concatenate([acc.buffer[:, None], lo[:, :rank], hi[:, :rank]],
                           axis=1).astype(np.int64, copy=False)
    # distinct boxes by row hash (np.unique on rows sorts them as bytes, far slower); the
    # rows come out per access, so the order the distinct boxes are cut in does not show
    box_of, first = distinct_row_ids(boxes)
    unique = boxes if first.size == len(boxes) else boxes[first]
    del boxes
    storage = np.unique([b.base for b in acc.buffers], return_inverse=True)[1].ravel()
    owner, index, nbytes, lines = _box_lines(buffers, unique,
                                             region_shapes(buffers, storage, unique))
    if owner.size == len(unique) and np.array_equal(owner, np.arange(owner.size)):
        # a row per box (every box inside one region, the usual case): the box's row is
        # the access's, found with no search
        ptr = count = None
    else:
        ptr = np.searchsorted(owner, np.arange(len(unique) + 1))
        count = ptr[box_of + 1] - ptr[box_of]
        if np.all(count == 1):
            box_of, ptr = ptr[box_of], None       # the one row of each access
    if ptr is None:      # a row per access, in place
        r = box_of
        del box_of
        return RegionAccesses(
            task=acc.task.astype(np.int64, copy=False),
            region=(storage[acc.buffer].astype(np.int64) << 40) + index[r],
            bytes=nbytes[r], lines=lines[r],
            write=acc.write.astype(bool, copy=False), bypass=acc.bypass.astype(bool, copy=False))
    a = np.repeat(np.arange(acc.size), count)
    r = np.arange(a.size) - np.repeat(np.cumsum(count) - count, count) + ptr[box_of][a]
    return RegionAccesses(
        task=acc.task[a].astype(np.int64),
        # keyed on the storage: every geometry of one tensor (an inplace reshape) meets there
        region=(storage[acc.buffer[a]].astype(np.int64) << 40) + index[r],
        bytes=nbytes[r], lines=lines[r],
        write=acc.write[a].astype(bool), bypass=acc.bypass[a].astype(bool))


# an NZ fractal: 16 rows of 32 bytes, one L2 line
NZ_FRACTAL_ROWS, NZ_FRACTAL_ROW_BYTES = 16, 32


def fractal_boxes(acc: Accesses) -> tuple[tuple[GmBuffer, ...], np.ndarray, np.ndarray]:
    """The buffers and boxes whose bytes ``_box_lines`` cuts into lines.

    An NZ matrix (rows x cols, optionally batched) stores 16 x 32-byte fractals, column
    block after column block, each block's fractals down all the rows (docs/sources.md §3):
    a box's bytes are then one contiguous run per column block, and a column tile touches
    only its own lines, where the same box of a row-major matrix touches a part of every
    line it crosses.  Such a buffer is cut as the row-major array [batch, column blocks,
    row blocks, 512 bytes] it is in memory, each box widened to the fractals it touches.
    A tensor that has another geometry too (an inplace reshape) keeps its row-major lines,
    so every geometry of its bytes still meets in the same lines.
    """
    bases = [b.base for b in acc.buffers]
    buffers, lo, hi = list(acc.buffers), acc.lo, acc.hi
    for i, b in enumerate(acc.buffers):
        if b.format != "NZ" or not 2 <= len(b.shape) <= 3 or bases.count(b.base) > 1 \
                or lo.shape[1] < 4:
            continue
        if lo is acc.lo:
            lo, hi = lo.copy(), hi.copy()
        rows = acc.buffer == i
        r = len(b.shape)
        per_row = max(NZ_FRACTAL_ROW_BYTES // b.elem, 1)      # elements of a fractal row
        n_rows, n_cols = b.shape[-2], b.shape[-1]
        lead_lo = lo[rows, 0] if r == 3 else np.zeros(rows.sum(), np.int64)
        lead_hi = hi[rows, 0] if r == 3 else np.ones(rows.sum(), np.int64)
        r_lo, r_hi = lo[rows, r - 2], hi[rows, r - 2]
        c_lo, c_hi = lo[rows, r - 1], hi[rows, r - 1]
        fractal = NZ_FRACTAL_ROWS * NZ_FRACTAL_ROW_BYTES
        new_lo = np.stack([lead_lo, c_lo // per_row, r_lo // NZ_FRACTAL_ROWS,
                           np.zeros_like(r_lo)], axis=1)
        new_hi = np.stack([lead_hi, -(-c_hi // per_row), -(-r_hi // NZ_FRACTAL_ROWS),
                           np.full_like(r_lo, fractal)], axis=1)
        pad = lo.shape[1] - 4
        lo[rows] = np.pad(new_lo, ((0, 0), (0, pad)))
        hi[rows] = np.pad(new_hi, ((0, 0), (0, pad)), constant_values=1)
        shape = (b.shape[0] if r == 3 else 1, -(-n_cols // per_row),
                 -(-n_rows // NZ_FRACTAL_ROWS), fractal)
        buffers[i] = replace(b, shape=shape, elem=1)
    return tuple(buffers), lo, hi


# boxes cut at a time: the temporaries of a slice stay in cache and are reused, rather
# than a dozen arrays of every box each faulted in fresh
BOX_SLICE = 1 << 15


def region_shapes(buffers, storage: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Per buffer, the shape of its L2 regions: (lines per row of its storage, region rows,
    region lines per row), or zeros for regions of 64 consecutive lines.

    The cache evicts a whole region (l2.py), so a region whose lines are read at different
    times stays as recent as its latest reader: 64 consecutive lines of a row-major matrix
    hold a piece of every column tile that crosses them, and keep them all as long as any
    one is read.  A tensor whose boxes are rectangles of whole 512-byte lines (rows as long
    as a box's stride) is cut instead into blocks of ``rows x lines`` (at most 64 lines)
    shaped like its most frequent box, so a tile's lines share their regions with no other
    tile's and a region is as recent as its own lines, as the chip's L2 keeps each line
    (docs/sources.md §3).  Every view of one storage (an inplace reshape) is cut the same
    way; a storage whose boxes do not agree on a row, or whose rows are not whole lines,
    keeps the consecutive regions, where every view's bytes meet.  The most frequent width
    and height are each taken on their own, the smaller on a tie."""
    shapes = np.zeros((len(buffers), 3), np.int64)
    shaped = np.asarray([len(b.shape) > 0 for b in buffers], bool)
    boxes = boxes[shaped[boxes[:, 0]]]
    if not boxes.size:
        return shapes
    row, width, height = _box_rectangles(buffers, boxes)
    group = storage[boxes[:, 0]]
    per_region = L2_REGION_BYTES // L2_LINE_BYTES
    # a storage qualifies when every box of every view has one row of whole lines
    n_groups = int(storage.max()) + 1
    lowest = np.full(n_groups, np.iinfo(np.int64).max)
    highest = np.full(n_groups, -1)
    np.minimum.at(lowest, group, row)
    np.maximum.at(highest, group, row)
    ok = (highest >= 0) & (lowest == highest) & (lowest >= L2_LINE_BYTES) \
        & (lowest % L2_LINE_BYTES == 0)
    keep = ok[group]
    group, width, height = group[keep], width[keep], height[keep]
    w_mode = _mode_per_group(group, np.minimum(width, per_region), n_groups)
    h_mode = _mode_per_group(group, np.minimum(height, per_region), n_groups)
    c = _pow2_divisor(w_mode, per_region)
    r = _pow2_divisor(h_mode, per_region // c)
    blocked = ok & ((r > 1) | (c < per_region))
    per_storage = np.stack([np.where(blocked, highest // L2_LINE_BYTES, 0),
                            np.where(blocked, r, 0), np.where(blocked, c, 0)], axis=1)
    return per_storage[storage]


def _mode_per_group(group: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group id, its most frequent value (the smallest on a tie; 0 with no values)."""
    mode = np.zeros(n_groups, np.int64)
    if not group.size:
        return mode
    order = np.lexsort((values, group))
    g, v = group[order], values[order]
    head = np.flatnonzero(np.concatenate([[True], (g[1:] != g[:-1]) | (v[1:] != v[:-1])]))
    count = np.diff(np.append(head, g.size))
    # per group, the run with the most boxes, the first (smallest value) among equals
    best = np.lexsort((v[head], -count, g[head]))
    first = best[np.concatenate([[True], g[head][best][1:] != g[head][best][:-1]])]
    mode[g[head][first]] = v[head][first]
    return mode


def _buffer_layout(buffers, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """Per buffer, its shape padded to ``rank`` dims (unused trailing dims of size 1) and
    the bytes of one step of each dim, row-major."""
    shape_of = np.ones((len(buffers), rank), np.int64)
    for i, whole in enumerate(buffers):
        shape_of[i, :len(whole.shape)] = whole.shape
    step_of = np.ones_like(shape_of)
    for d in range(rank - 2, -1, -1):
        step_of[:, d] = step_of[:, d + 1] * shape_of[:, d + 1]
    step_of *= np.asarray([b.elem for b in buffers], np.int64)[:, None]
    return shape_of, step_of


def _run_dim(lo: np.ndarray, hi: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """Per box, the dim its contiguous runs lie along: the last one it does not cover whole
    (0 if it covers all); the dims after it are whole, one run per step of those before."""
    partial = (lo != 0) | (hi != shape)
    return np.where(partial.any(axis=1), shape.shape[1] - 1 - np.argmax(partial[:, ::-1], axis=1),
                    0)


def _box_rectangles(buffers, boxes: np.ndarray):
    """Per box (buffer, lo, hi): (bytes of the row it is a rectangle in, lines it spans in
    such a row, rows).  A box is runs of its last partly covered dim (the dims after it
    whole), one per step of the dims before it, so its row is that dim's stride; a box of
    whole view rows is a rectangle of the view's rows.  A vector has no rows (all zero):
    its regions stay consecutive lines."""
    rank = (boxes.shape[1] - 1) // 2
    buffer, lo, hi = boxes[:, 0], boxes[:, 1:1 + rank], boxes[:, 1 + rank:]
    dims = np.asarray([len(b.shape) for b in buffers], np.int64)[buffer]
    shape_of, step_of = _buffer_layout(buffers, rank)
    elem = np.asarray([b.elem for b in buffers], np.int64)[buffer]
    shape, step = shape_of[buffer], step_of[buffer]
    ext = hi - lo
    run_dim = _run_dim(lo, hi, shape)
    k = np.arange(len(boxes))
    view_row = shape[k, np.maximum(dims - 1, 0)] * elem
    rows_before = np.cumprod(ext, axis=1)[k, np.maximum(run_dim - 1, 0)]
    inner = run_dim > 0
    # an inner run's row: one step of the dim before it
    row = np.where(inner, step[k, np.maximum(run_dim - 1, 0)], view_row)
    width = np.where(inner, ext[k, run_dim] * step[k, run_dim], view_row) // L2_LINE_BYTES
    height = np.where(inner, rows_before,
                      ext.prod(axis=1) * elem // np.maximum(view_row, 1))
    vector = dims < 2
    zero = np.zeros(len(boxes), np.int64)
    return (np.where(vector, zero, row), np.where(vector, zero, width),
            np.where(vector, zero, height))


def _pow2_divisor(n: np.ndarray, most) -> np.ndarray:
    """Per value, the largest power of two that divides it and is at most ``most``, itself a
    power of two (1 for 0)."""
    n = np.asarray(n, np.int64)
    return np.where(n > 0, np.minimum(n & -n, most), 1)


def _box_lines(buffers, boxes: np.ndarray, shapes: np.ndarray):
    """Per box (rows of buffer, lo, hi): its (box, region index, bytes, line bitmap) rows,
    grouped by box in box order."""
    if len(boxes) <= BOX_SLICE:
        return _box_lines_slice(buffers, boxes, shapes)
    parts = [_box_lines_slice(buffers, boxes[lo:lo + BOX_SLICE], shapes)
             for lo in range(0, len(boxes), BOX_SLICE)]
    owner = np.concatenate([p[0] + lo for p, lo in zip(parts, range(0, len(boxes), BOX_SLICE))])
    return owner, *(np.concatenate([p[k] for p in parts]) for k in (1, 2, 3))


def _box_lines_slice(buffers, boxes: np.ndarray, shapes: np.ndarray):
    rank = (boxes.shape[1] - 1) // 2
    buffer, lo, hi = boxes[:, 0], boxes[:, 1:1 + rank], boxes[:, 1 + rank:]
    n = len(boxes)
    # per buffer, then per box by lookup (a mask per buffer would cost boxes x buffers)
    shape_of, step_of = _buffer_layout(buffers, rank)
    step = step_of[buffer]
    ext = hi - lo
    run_dim = _run_dim(lo, hi, shape_of[buffer])[:, None]
    run_len = (np.take_along_axis(ext, run_dim, 1) * np.take_along_axis(step, run_dim, 1))[:, 0]
    base = (lo * step).sum(axis=1)
    outer = np.where(np.arange(rank) < run_dim, ext, 1)  # rows of runs per outer dim
    runs = np.where(run_len > 0, outer.prod(axis=1), 0)
    single = bool((runs == 1).all())
    if single:
        # one run per box (its outer dims one row each): the run starts at the box
        row, start = np.arange(n), base
    else:
        row, start = _run_starts(runs, base, outer, step)
    end = start + run_len[row]
    # per run, its tensor's region shape (none looked up when no tensor is cut in blocks)
    shape = shapes[buffer[row]] if shapes[:, 0].any() else shapes[:0]
    blocks = shape[:, 0] > 0
    if blocks.any():
        # runs of tensors cut in blocks, then the others; every box's rows sorted together
        parts = [_block_regions(row[blocks], start[blocks], end[blocks], shape[blocks]),
                 _run_regions(row[~blocks], start[~blocks], end[~blocks])]
        owner, region, inside, mask = (np.concatenate([p[k] for p in parts])
                                       for k in range(4))
        order = np.lexsort((region, owner))
        owner, region, inside, mask = owner[order], region[order], inside[order], mask[order]
        single = False
    else:
        owner, region, inside, mask = _run_regions(row, start, end)
    if single or not owner.size:
        # a box's pieces are then its one run's pieces, each in a region of its own:
        # nothing to join
        return owner, region, inside.astype(float), mask
    # runs of one box that meet in a region become one row
    head = np.flatnonzero(np.concatenate([[True], (owner[1:] != owner[:-1])
                                          | (region[1:] != region[:-1])]))
    return owner[head], region[head], np.add.reduceat(inside, head).astype(float), \
        np.bitwise_or.reduceat(mask, head)


def _run_starts(runs, base, outer, step):
    """(box, first byte) of every run of every box, in increasing address order per box."""
    # runs per step of each outer dim: the product of the outer dims after it
    inner = np.cumprod(outer[:, :0:-1], axis=1)[:, ::-1]
    inner = np.concatenate([inner, np.ones((len(runs), 1), np.int64)], axis=1)
    row = np.repeat(np.arange(len(runs)), runs)
    k = np.arange(row.size) - np.repeat(np.cumsum(runs) - runs, runs)
    start = base[row]
    for d in range(outer.shape[1] - 1):
        if (outer[:, d] > 1).any():          # dims every box covers in one step add nothing
            start += (k // inner[row, d]) % outer[row, d] * step[row, d]
    return row, start


def _run_regions(row, start, end):
    """Per (run, region it touches): its box, region index, bytes inside and line bitmap."""
    per_region = L2_REGION_BYTES // L2_LINE_BYTES
    first, last = start // L2_LINE_BYTES, (end - 1) // L2_LINE_BYTES
    region = first // per_region
    count = last // per_region - region + 1
    if (count == 1).all():
        # most runs stay inside one region: their lines and bytes need no clipping
        low, high = first - region * per_region, last - region * per_region
        return row, region, end - start, _line_mask(low, high)
    piece = np.repeat(np.arange(row.size), count)
    region = region[piece] + (np.arange(piece.size) - np.repeat(np.cumsum(count) - count, count))
    low = np.maximum(first[piece], region * per_region) - region * per_region
    high = np.minimum(last[piece], region * per_region + per_region - 1) - region * per_region
    inside = np.minimum(end[piece], (region + 1) * L2_REGION_BYTES) \
        - np.maximum(start[piece], region * L2_REGION_BYTES)
    return row[piece], region, inside, _line_mask(low, high)


def _block_regions(row, start, end, shape):
    """Per (run, block region it touches): its box, region index, bytes inside and line
    bitmap, for tensors cut in blocks of r rows x c lines (``region_shapes``): bit
    (row % r) * c + column % c of region (row // r) * ceil(W / c) + column // c, W lines a
    row."""
    if not row.size:
        z = np.zeros(0, np.int64)
        return z, z, z, z.astype(np.uint64)
    line = L2_LINE_BYTES
    width, r, c = shape[:, 0], shape[:, 1], shape[:, 2]
    first, last = start // line, (end - 1) // line
    # a run covering several whole rows: one segment per row
    rows = last // width - first // width + 1
    seg = np.repeat(np.arange(row.size), rows)
    k = np.arange(seg.size) - np.repeat(np.cumsum(rows) - rows, rows)
    grow = first[seg] // width[seg] + k
    lo_line = np.maximum(first[seg], grow * width[seg])
    hi_line = np.minimum(last[seg], grow * width[seg] + width[seg] - 1)
    w, rr, cc = width[seg], r[seg], c[seg]
    col_lo, col_hi = lo_line - grow * w, hi_line - grow * w
    # a segment over several block columns: one piece per block column
    count = col_hi // cc - col_lo // cc + 1
    piece = np.repeat(np.arange(seg.size), count)
    j = np.arange(piece.size) - np.repeat(np.cumsum(count) - count, count)
    bcol = col_lo[piece] // cc[piece] + j
    cp = cc[piece]
    low = np.maximum(col_lo[piece], bcol * cp) - bcol * cp
    high = np.minimum(col_hi[piece], bcol * cp + cp - 1) - bcol * cp
    g = grow[piece]
    base = (g % rr[piece]) * cp
    region = (g // rr[piece]) * (-(-w[piece] // cp)) + bcol
    line_lo = g * w[piece] + bcol * cp + low
    line_hi = g * w[piece] + bcol * cp + high
    s, e = start[seg][piece], end[seg][piece]
    inside = np.minimum(e, (line_hi + 1) * line) - np.maximum(s, line_lo * line)
    return row[seg][piece], region, inside, _line_mask(base + low, base + high)


def _line_mask(low, high):
    """The uint64 bitmap of lines low .. high (inclusive) of a region."""
    return (np.uint64(2 ** 64 - 1) >> (63 - (high - low)).astype(np.uint64)) \
        << low.astype(np.uint64)


def _assemble(kernel, traced, calls, call_root, call_bodies, workspace, roots,
              leaves) -> Program:
    sizes = np.asarray([t.core.size for t in calls], np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    n = int(starts[-1])
    cat = lambda arrs, dt=np.int64: np.concatenate(arrs).astype(dt) if arrs else np.zeros(0, dt)
    task_call = np.repeat(np.arange(len(calls)), sizes)
    task_op = np.arange(n) - starts[task_call] if n else np.zeros(0, np.int64)
    work = Work.concat([t.work for t in calls])
    row_starts = np.concatenate([[0], np.cumsum([t.acc.size for t in calls])]).astype(np.int64)
    acc = Accesses.concat([t.acc for t in calls], starts[:-1])
    first_call: dict[int, int] = {}
    for c, r in enumerate(call_root):
        first_call.setdefault(r, c)
    roots = {key: _with_operands(root, first_call.get(root.index), starts, row_starts, acc)
             for key, root in roots.items()}
    task_leaf, task_core = cat([t.leaf for t in calls]), cat([t.core for t in calls])
    # the per-call arrays are all in the joined ones now: let them go before the
    # dependency and L2 passes need their temporaries (calls is ours, the caller is done)
    calls.clear()
    edge_src, edge_dst = region_edges(acc.task, acc.buffer, acc.lo, acc.hi,
                                      acc.write.astype(bool), acc.tag, n, acc.buffers) \
        if n else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    edge_src, edge_dst, edge_hub = encode_call_edges(edge_src, edge_dst, task_call)
    tail_task, tail_hub = end_hubs(edge_src, edge_dst, task_call,
                                   int(edge_hub.max()) + 1 if edge_hub.size else 0)
    task_leaf, leaf_functions = _used_leaves(task_leaf, leaves.items)
    call_leaf_tasks = sizes
    bodies = np.asarray(call_bodies, np.int64)
    call_dev, call_pos = stitch(call_leaf_tasks, bodies,
                                kernel.options.runtime_options.stitch_function_max_num,
                                np.asarray([c.parallel for c in traced.calls], bool))
    ws = np.bincount(call_dev, weights=np.asarray(workspace, float)) if call_dev.size else [0]
    return Program(
        kernel=kernel.name, root_functions=list(roots.values()), leaf_functions=leaf_functions,
        call_root=np.asarray(call_root, np.int64), call_bodies=bodies,
        call_dev_task=call_dev, call_in_dev_task=call_pos,
        task_call=task_call, task_leaf=task_leaf, task_op=task_op,
        task_core=task_core, work=work, regions=l2_regions(acc),
        edge_src=edge_src, edge_dst=edge_dst, edge_hub=edge_hub,
        tail_task=tail_task, tail_hub=tail_hub,
        workspace_bytes=int(np.max(ws)) if len(ws) else 0,
        control_inputs=tuple(n for n, t in kernel.tensors.items() if t.control_flow_input))
