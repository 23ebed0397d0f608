"""Simulation tiers: the functional simulator (and, later, RTL harnesses)."""

from .dram import Dram, DramError
from .fsim import (Blocked, BudgetError, DeadlockError, ExecutionError, FunctionalSimulator, ProtocolError,
                   RunStats, SimError)

__all__ = ["Dram", "DramError", "FunctionalSimulator", "RunStats", "SimError", "ExecutionError",
           "DeadlockError", "ProtocolError", "BudgetError", "Blocked"]
