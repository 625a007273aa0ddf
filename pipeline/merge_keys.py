"""Breadth-merge setting keys that select nothing in the compiled kernel.

``cube_l1_reuse_setting``, ``cube_nbuffer_setting`` and ``vec_nbuffer_setting`` take, besides
the global keys (an int hashOrder, "DEFAULT"), a function key ``func<root>_<order>`` or an op
label.  Upstream ignores a key that matches no function, so a mistyped label changes
nothing and says nothing; ptolab says so (a note on stderr; the run goes on, as upstream's
would).
"""
from __future__ import annotations

from simcore.compiler import Program
from simcore.compiler.program import CoreType
from simcore.spec.kernel import Kernel

# each setting and the core type whose leaf functions it merges
SETTINGS = {"cube_l1_reuse_setting": CoreType.AIC, "cube_nbuffer_setting": CoreType.AIC,
            "vec_nbuffer_setting": CoreType.AIV}


def _global(key: str) -> bool:
    if key == "DEFAULT":
        return True
    try:
        int(key)
    except ValueError:
        return False
    return True


def unmatched_merge_keys(kernel: Kernel, program: Program) -> list[str]:
    """One sentence per setting key that names no label and no function of its core type."""
    notes = []
    options = kernel.options.pass_options
    for setting, core in SETTINGS.items():
        leaves = [f for f in program.leaf_functions if f.core_type == core]
        labels = sorted({f.label for f in leaves if f.label})
        funcs = {f.hash_order for f in leaves}
        for key in getattr(options, setting):
            if _global(key) or key in funcs or key in labels:
                continue
            notes.append(
                f"pass_options.{setting} key '{key}' names no {core.name} op label or "
                f"function of kernel '{kernel.name}', so it merges nothing (upstream ignores "
                f"it the same way); its {core.name} labels: {', '.join(labels) or 'none'}; "
                f"function keys look like func<root>_<order> (the swimlane's hashOrder-hint).")
    return notes
