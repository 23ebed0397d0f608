"""Tuning logs: one JSON object per measured point, a line each, appended as results arrive.

A record holds the task (key, operator, spec, config name and
fingerprint), the design hash the cycles were measured on, the space hash,
the knobs, ``cycles`` or ``error``, the wall time, the tuner, a timestamp
and the tool version. Appending line by line means a run that is killed
loses nothing it measured; a damaged last line (a kill mid-write) is
skipped on reading. The log is the measurement cache too: a point already
in it for the same task, config and design is not measured again.
"""

import datetime
import json
from importlib import metadata
from pathlib import Path

__all__ = ["TuningLog", "LOG_SCHEMA", "TuningLogError"]

LOG_SCHEMA = 1

#: The fields every record has.
REQUIRED = {"task", "op", "spec", "config", "fingerprint", "design", "space", "knobs", "cycles", "error"}


class TuningLogError(ValueError):
    """A tuning log that cannot be read."""


def _tool_version():
    try:
        return metadata.version("tilewright")
    except metadata.PackageNotFoundError:
        return "unknown"


def _knob_key(knobs):
    return json.dumps(knobs, sort_keys=True)


class TuningLog:
    """The records of a JSON-lines file (or of memory only, with ``path=None``), and ``records`` given."""

    def __init__(self, path=None, records=()):
        self.path = Path(path) if path else None
        self.records = []
        self._index = {}
        for record in records:
            self._remember(record)
        if self.path and self.path.exists():
            try:
                text = self.path.read_text()
            except (OSError, UnicodeDecodeError) as e:
                raise TuningLogError(f"{self.path}: cannot read the tuning log ({e})") from None
            lines = text.splitlines()
            for number, line in enumerate(lines, 1):
                try:
                    record = json.loads(line)
                    if not isinstance(record, dict) or record.get("schema") != LOG_SCHEMA \
                            or not REQUIRED <= set(record):
                        raise ValueError
                    self._remember(record)
                except ValueError:
                    if number < len(lines) or text.endswith("\n"):      # (only a torn last line is forgiven)
                        raise TuningLogError(f"{self.path}:{number}: not a schema-{LOG_SCHEMA} tuning record") \
                            from None
                    # a kill mid-write: drop the fragment, so the next record starts a line of its own
                    with open(self.path, "r+b") as f:
                        f.truncate(len(text.encode()) - len(line.encode()))

    def _remember(self, record):
        self.records.append(record)
        self._index[(record["task"], record["fingerprint"], record["design"], record["space"],
                     _knob_key(record["knobs"]))] = record

    def lookup(self, task, design, knobs, space_hash=None):
        """The record of ``knobs`` of ``task`` measured on ``design`` in its space (``space_hash``, default
        the task's current one: records of another template version are not this point's), or None."""
        space_hash = space_hash or task.space().hash
        return self._index.get((task.key, task.config.fingerprint, design, space_hash, _knob_key(knobs)))

    def append(self, task, design, space_hash, result, tuner):
        """Record one :func:`~tilewright.compiler.tune.measure.measure` result (and write its line)."""
        record = {"schema": LOG_SCHEMA, "task": task.key, **task.to_json(), "fingerprint": task.config.fingerprint,
                  "design": design, "space": space_hash, "knobs": result["knobs"], "cycles": result["cycles"],
                  "error": result["error"], "seconds": result["seconds"], "tuner": tuner,
                  "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "tool": f"tilewright {_tool_version()}"}
        self._remember(record)
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a") as f:
                f.write(json.dumps(record) + "\n")
        return record

    def replay(self, design):
        """A measurement function (as :func:`~.measure.measure` is called) answering from this log's records
        on ``design``: cycle counts are deterministic, so a replayed measurement is the measurement."""
        def measure_fn(task, points):
            return [{k: self.lookup(task, design, p)[k] for k in ("knobs", "cycles", "error", "seconds")}
                    for p in points]
        return measure_fn

    def task_records(self, task, design=None):
        """The records of ``task`` on its config and its DRAM timing (and ``design``, if given)."""
        return [r for r in self.records if r["task"] == task.key and r["fingerprint"] == task.config.fingerprint
                and r.get("memory") == task.memory_json and (design is None or r["design"] == design)]

    def best_schedule(self, task):
        """``(record, tiles)`` of the fewest cycles measured for ``task`` on its config and DRAM timing in its
        space (records of another template version do not count), or ``(None, None)``."""
        space = task.space()
        best = None
        for r in self.task_records(task):
            if r["space"] == space.hash and r["cycles"] is not None and (best is None or r["cycles"] < best["cycles"]):
                best = r
        return (best, space.make(best["knobs"])) if best else (None, None)
