"""Autotuning: search spaces of schedules, measured in RTL cycles, steered by an XGBoost cost model.

See docs/tuning.md. The pieces: :class:`Task` (an operator shape on a config and
its space), :func:`measure` (compile and run points on the RTL), runners
(:class:`LocalRunner`, :class:`DaskRunner`), :class:`TuningLog` (JSON lines,
also the measurement cache), :class:`CostModel` and the tuners
(:class:`XGBTuner`, :class:`RandomTuner`, :class:`GATuner`) driven by :func:`tune`.
"""

from .log import LOG_SCHEMA, TuningLog, TuningLogError
from .measure import design_hash, measure
from .model import CostModel
from .runner import DaskRunner, LocalRunner, RunnerError, make_runner
from .task import FEATURES, LayerSpecError, Task, features, model_tasks, parse_layer
from .tuners import TUNERS, GATuner, RandomTuner, TuneResult, XGBTuner, tune

__all__ = ["Task", "features", "FEATURES", "parse_layer", "model_tasks", "LayerSpecError", "measure", "design_hash",
           "LocalRunner", "DaskRunner", "make_runner", "RunnerError", "TuningLog", "TuningLogError", "LOG_SCHEMA",
           "CostModel", "XGBTuner", "RandomTuner", "GATuner", "TUNERS", "tune", "TuneResult"]
