"""The base every config model derives from: unknown keys are errors, not silence.

Strict types: a quoted number, a float where an int is meant, or ``true`` where a
count is meant is a mistake a user could only have made by accident, so it is
refused rather than converted; infinities and NaN are never a valid setting.
"""
from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
