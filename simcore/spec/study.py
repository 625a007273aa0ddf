"""Studies (a kernel plus ordered tuning stages) and the workflow file."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from .base import Strict
from .errors import ConfigError
from .loader import load

NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"


# Entries of a study's results folder besides its stages (workflow/rules: the report, the
# imported kernel of a Python study, the jobs' logs): a stage of that name would clash.
RESERVED_STAGE_NAMES = ("logs", "report.html", "kernel.yaml")


class Stage(Strict):
    name: str = Field(pattern=NAME)
    description: str = Field(min_length=1)   # what changed and why, one sentence
    set: dict[str, Any] = Field(default_factory=dict)
    # The problem this stage runs, when a study runs more than one (another size, say):
    # a report compares a stage's times only with the stages of its workload.
    workload: str = Field("", pattern=r"^$|" + NAME)
    # Figures PyPTO's documentation gives for this stage (docs/cases.md) (e.g. kernel_us, e2e_us): reports overlay
    # them and tests compare against them; the model never reads them.
    documented: dict[str, float] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _not_reserved(cls, name: str) -> str:
        if name.lower() in RESERVED_STAGE_NAMES:
            raise ValueError(f"stage name '{name}' is taken by the study's results folder "
                             f"(it holds {', '.join(RESERVED_STAGE_NAMES)} beside the stage "
                             f"folders); choose another name")
        return name


class Study(Strict):
    name: str = Field(pattern=NAME)
    description: str = ""
    # a kernel config by name (configs/kernels/<name>.toml|yaml) or a PyPTO Python kernel,
    # "kernels/attn.py:ifa_kernel" (relative to configs/), imported by ``ptolab import``
    kernel: str
    # for a Python kernel: dynamic dims (``--dim``) and arguments (``--arg``: a tensor
    # shape such as "fp16[64, 64]" or a plain value)
    dims: dict[str, int] = Field(default_factory=dict)
    args: dict[str, Any] = Field(default_factory=dict)
    hardware: str = "dav_2201"
    rounds: int = Field(1, ge=1, le=200)
    # run every stage once per factor of the chip's race (its hardware file's [race]) too:
    # the report gives each time's median and range beside the single run's files
    race: bool = False
    stages: list[Stage] = Field(min_length=1)

    @property
    def python_kernel(self) -> tuple[str, str | None] | None:
        """(file, function) when the kernel is a PyPTO Python file, else None."""
        path, sep, function = self.kernel.rpartition(":")
        if sep and path.endswith(".py"):
            return path, function or None
        return (self.kernel, None) if self.kernel.endswith(".py") else None

    @model_validator(mode="after")
    def _inputs_need_a_python_kernel(self) -> "Study":
        if (self.dims or self.args) and self.python_kernel is None:
            raise ValueError(f"'dims' and 'args' belong to a Python kernel (kernel: "
                             f"FILE.py:FUNCTION); kernel '{self.kernel}' is a config, whose "
                             f"shapes are its params: set them in a stage's 'set' instead")
        return self

    @field_validator("stages")
    @classmethod
    def _unique(cls, stages: list[Stage]) -> list[Stage]:
        seen = set()
        for stage in stages:
            if stage.name in seen:
                raise ValueError(f"stage name '{stage.name}' appears twice; names must be unique")
            seen.add(stage.name)
        return stages

    @field_validator("stages")
    @classmethod
    def _workloads_on_all_or_none(cls, stages: list[Stage]) -> list[Stage]:
        unnamed = [s.name for s in stages if not s.workload]
        if unnamed and len(unnamed) < len(stages):
            names = ", ".join(f"'{n}'" for n in unnamed)
            raise ValueError(f"{'stages' if len(unnamed) > 1 else 'stage'} {names} "
                             f"{'name' if len(unnamed) > 1 else 'names'} no workload while "
                             f"others do; give every stage its workload (the stages that run "
                             f"the same problem share one) or none")
        return stages


class Workflow(Strict):
    studies: list[str] = Field(min_length=1)
    results: str = "results"


def find_config(directory: Path, name: str, what: str) -> Path:
    """configs/<kind>/<name>.toml|yaml|yml, exactly one of them."""
    if Path(name).suffix:
        path = Path(name) if Path(name).is_absolute() else directory / name
        if not path.exists():
            raise ConfigError(f"{what} file '{path}' does not exist.")
        return path
    hits = [directory / f"{name}{ext}" for ext in (".toml", ".yaml", ".yml")
            if (directory / f"{name}{ext}").exists()]
    if not hits:
        raise ConfigError(f"no {what} named '{name}' in {directory} (looked for "
                          f"{name}.toml, {name}.yaml, {name}.yml).")
    if len(hits) > 1:
        raise ConfigError(f"{what} '{name}' is ambiguous: {', '.join(map(str, hits))}; "
                          f"keep one.")
    return hits[0]


def load_study(path: Path) -> Study:
    return load(Study, path, "study")


def load_workflow(path: Path) -> Workflow:
    return load(Workflow, path, "workflow")
