"""Breadth-merge setting keys that select nothing in the compiled kernel.

``cube_l1_reuse_setting``, ``cube_nbuffer_setting`` and ``vec_nbuffer_setting`` take, besides
the defaults ("DEFAULT", and the negative ints -1 and -2), a hashOrder (an int from 0), a
function key ``func<root>_<order>`` or an op label.  Upstream ignores a key that matches no
function, so a mistyped one changes nothing and says nothing; ptolab says so (a note on
stderr; the run goes on, as upstream's would).
"""
from __future__ import annotations

from simcore.compiler import Program
from simcore.compiler.program import CoreType
from simcore.spec.kernel import Kernel

# each setting and the core type whose leaf functions it merges
SETTINGS = {"cube_l1_reuse_setting": CoreType.AIC, "cube_nbuffer_setting": CoreType.AIC,
            "vec_nbuffer_setting": CoreType.AIV}


def _default(key: str) -> bool:
    if key == "DEFAULT":
        return True
    try:
        return int(key) < 0
    except ValueError:
        return False


def unmatched_merge_keys(kernel: Kernel, program: Program) -> list[str]:
    """One sentence per setting key that names no label and no function of its core type."""
    notes = []
    options = kernel.options.pass_options
    for setting, core in SETTINGS.items():
        leaves = [f for f in program.leaf_functions if f.core_type == core]
        labels = sorted({f.label for f in leaves if f.label})
        selectable = {f.hash_order for f in leaves} | {str(f.order) for f in leaves}
        for key in getattr(options, setting):
            if _default(key) or key in selectable or key in labels:
                continue
            notes.append(
                f"pass_options.{setting} key '{key}' names no {core.name} op label or "
                f"function of kernel '{kernel.name}', so it merges nothing (upstream ignores "
                f"it the same way); its {core.name} labels: {', '.join(labels) or 'none'}; "
                f"hashOrders: {', '.join(sorted({str(f.order) for f in leaves}, key=int))}; "
                f"function keys look like func<root>_<order> (the swimlane's hashOrder-hint).")
    return notes


def merges_held_apart(program: Program) -> list[str]:
    """One sentence per leaf function whose merge count, set or automatic, asked to merge
    tasks that wait on each other (simcore/compiler/mergeorder.py)."""
    notes = []
    for function, core, extra, automatic in program.info.get("merges_held_apart", ()):
        settings = "vec_nbuffer_setting" if core == "AIV" else \
            "cube_nbuffer_setting / cube_l1_reuse_setting"
        apart = (f"{extra} more {core} task(s) of function {function} than the "
                 + (f"automatic merge count (no pass_options.{settings} names it) gives"
                    if automatic else "setting asks for")
                 + ", because the tasks it would merge wait on each other (successive steps "
                   "of a chain), so they run unmerged")
        notes.append(f"{apart}; nothing to change unless you want them merged differently."
                     if automatic else
                     f"pass_options.{settings}: {apart} (upstream groups them apart, or, "
                     f"merging in topological order, stops the compile with a cycle error); "
                     f"merge fewer (1 turns it off) or merge tasks that do not depend on "
                     f"each other.")
    return notes
