"""Compiler: tensor expressions, schedules, passes, code generation (ARCHITECTURE.md §6)."""

from .build import PIPELINE, build, lower_to_ir
from .checker import CheckError, check
from .program import Program, ProgramError
from .schedule import ScheduleError, create_schedule

__all__ = ["build", "lower_to_ir", "PIPELINE", "check", "CheckError", "Program", "ProgramError",
           "create_schedule", "ScheduleError"]
