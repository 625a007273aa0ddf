import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The data the control flow of the Python kernels under tests/kernels_py reads, as
# `ptolab import --arg` would give it: glm_attention's s2 trip counts and block ids (each
# s2 tile's four blocks consecutive, as its one view per tile needs).
PY_KERNEL_ARGS = {"glm_attention": {"actual_seqs.values": [16384] * 8,
                                    "block_table.values": [[b * 128 + j for j in range(128)]
                                                           for b in range(8)]}}

KERNELS = REPO / "configs" / "kernels"


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A scratch project: the repo's configs, run against the repo's Snakefile."""
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    return tmp_path


@pytest.fixture
def msa_path() -> Path:
    return KERNELS / "multi_stitch_add.yaml"


@pytest.fixture(scope="session")
def default_build(tmp_path_factory) -> Path:
    """The default workflow (every study of configs/workflow.yaml), built once per test run
    by the real snakemake on a scratch copy of configs/.  Read it, never change it."""
    if shutil.which("snakemake") is None or shutil.which("ptolab") is None:
        pytest.skip("needs the installed ptolab and snakemake commands")
    work = tmp_path_factory.mktemp("default_build")
    shutil.copytree(REPO / "configs", work / "configs")
    proc = subprocess.run(["snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work), "-c2"],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return work


def one_study_copy(dest: Path, study: str) -> Path:
    """A scratch copy of configs/ whose workflow builds only ``study``."""
    shutil.copytree(REPO / "configs", dest / "configs")
    (dest / "configs" / "workflow.yaml").write_text(f"studies: [{study}]\nresults: results\n")
    return dest


def rt_lines(rows) -> list[str]:
    """A rowtext byte matrix (one value a row) as the strings it writes."""
    from pipeline.emit import rowtext as rt
    if not len(rows):
        return []
    return bytes(rt.Layout("%(v)s\n").render(len(rows), v=rows)).decode().split("\n")[:-1]


def draw_task_view(data, n_max: int, start_hi: int, length_hi: int):
    """A random swimlane TaskView for hypothesis tests of the writers: up to ``n_max`` tasks
    in dev tasks 0-3, edges between them, two core types, start stamps in [0, start_hi] and
    lengths in [0, length_hi] (many ties at small bounds).  Returns (view, order, start,
    length), ``order`` the tasks by core type, then start."""
    import numpy as np
    from hypothesis import strategies as st
    from pipeline.emit import swimlane as sw
    n = data.draw(st.integers(1, n_max))
    seq = np.sort(np.asarray(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))))
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                               max_size=3 * n))
    edges = sorted({(a, b) if a < b else (b, a) for a, b in pairs if a != b})
    src = np.asarray([a for a, _ in edges], np.int64)
    dst = np.asarray([b for _, b in edges], np.int64)
    start = np.asarray(data.draw(st.lists(st.integers(0, start_hi), min_size=n, max_size=n)))
    length = np.asarray(data.draw(st.lists(st.integers(0, length_hi), min_size=n, max_size=n)))
    core = np.asarray(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    v = sw.TaskView(seq=seq, task_id=np.arange(n), call=np.zeros(n, np.int64),
                    root=np.zeros(n, np.int64), op=np.arange(n), leaf=np.zeros(n, np.int64),
                    core_type=core, edge_src=src, edge_dst=dst, root_hash=[1], leaf_hash=[2],
                    labels=["x"])
    return v, np.lexsort((start, core)), start, length


def exp_sqrt_chain(n: int, tile: int):
    """exp over x, then sqrt over its result with half the tile, assembled into y: the
    intermediate goes through GM (and L2) between the two leaf functions."""
    from simcore.spec.kernel import Kernel
    return Kernel.model_validate({
        "name": "chain",
        "tensors": {"x": {"shape": [n], "role": "input"}, "y": {"shape": [n], "role": "output"}},
        "body": [{"set_vec_tile_shapes": [tile]},
                 {"op": "exp", "inputs": ["x"], "out": "e"},
                 {"set_vec_tile_shapes": [tile // 2]},
                 {"op": "sqrt", "inputs": ["e"], "out": "s"},
                 {"op": "assemble", "inputs": ["s"], "out": "y", "offsets": [0]}]})


@pytest.fixture
def consecutive_regions(monkeypatch):
    """Every tensor's L2 regions as 64 consecutive lines (no tile-shaped blocks,
    simcore/compiler/build.py ``region_shapes``): for tests that read which lines of a
    tensor a write lands on, where a region's bit is then its line's place in the tensor."""
    import numpy as np
    from simcore.compiler import build
    monkeypatch.setattr(build, "region_shapes",
                        lambda buffers, storage, boxes: np.zeros((len(buffers), 3), np.int64))
