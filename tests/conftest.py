import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KERNELS = REPO / "configs" / "kernels"


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """A scratch project: the repo's configs, run against the repo's Snakefile."""
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    return tmp_path


@pytest.fixture
def msa_path() -> Path:
    return KERNELS / "multi_stitch_add.yaml"
