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
