"""Schedule search spaces: named knobs, which combinations are valid, a mixed-radix index and a stable hash.

Each operator declares its space next to its schedule (:func:`~tilewright.compiler.ops.conv_space`,
:func:`~tilewright.compiler.ops.dense_space`). A point is a dict knob → value; its index
is the mixed-radix number of its value positions, the first knob most significant, so
``space.point(space.index(p)) == p`` and every index below ``len(space)`` names one point
(valid or not). ``space.problem(point)`` says why a point is invalid (the buffers it
would overfill, the threads it cannot split), or returns None; :meth:`Space.valid`
enumerates the valid indices once. The hash covers the space's name and knobs, so a
tuning log recorded against another template version is recognised as such.
"""

import hashlib
import json
from dataclasses import dataclass

__all__ = ["Knob", "Space"]


@dataclass(frozen=True)
class Knob:
    """One schedule choice and the values it may take, in a fixed order."""
    name: str
    values: tuple

    def __post_init__(self):
        if not self.values:
            raise ValueError(f"knob {self.name} has no values")


class Space:
    """The points of one schedule template for one task.

    ``problem(point)`` returns a one-line reason a point is invalid, or None;
    ``make(point)`` turns a point into the schedule's parameter object (tiles).
    ``name`` carries the template's version (``"conv2d/v2"``): a new one when
    the programs its points make change, so that tuning logs measured on
    the old ones stop counting (the name is part of :attr:`hash`).
    """

    def __init__(self, name, knobs, problem, make):
        self.name, self.knobs, self._problem, self._make = name, tuple(knobs), problem, make
        self._valid = self._valid_set = None
        self._strides = [1] * len(self.knobs)          # mixed-radix place values, the last knob's 1
        for k in range(len(self.knobs) - 2, -1, -1):
            self._strides[k] = self._strides[k + 1] * len(self.knobs[k + 1].values)

    def __len__(self):
        n = 1
        for knob in self.knobs:
            n *= len(knob.values)
        return n

    @property
    def hash(self):
        """A stable 16-hex-digit hash of the template's name, knob names and values."""
        text = json.dumps([self.name, [[k.name, list(k.values)] for k in self.knobs]], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def point(self, index):
        """The knob values of ``index`` (mixed radix, first knob most significant)."""
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} outside the space of {len(self)} points")
        values = {}
        for knob in reversed(self.knobs):
            index, digit = divmod(index, len(knob.values))
            values[knob.name] = knob.values[digit]
        return {k.name: values[k.name] for k in self.knobs}

    def index(self, point):
        """The index of ``point`` (a dict with every knob); ValueError names a knob or value not in the space."""
        if set(point) != {k.name for k in self.knobs}:
            raise ValueError(f"a point of {self.name} has the knobs {', '.join(k.name for k in self.knobs)}, "
                             f"not {', '.join(point)}")
        index = 0
        for knob in self.knobs:
            if point[knob.name] not in knob.values:
                raise ValueError(f"{knob.name}={point[knob.name]!r} is not one of {list(knob.values)}")
            index = index * len(knob.values) + knob.values.index(point[knob.name])
        return index

    def problem(self, point):
        """Why ``point`` is not a valid schedule (one line), or None."""
        return self._problem(point)

    def valid(self):
        """The indices of every valid point, ascending (enumerated once)."""
        if self._valid is None:
            self._valid = [i for i in range(len(self)) if self._problem(self.point(i)) is None]
            self._valid_set = set(self._valid)
        return self._valid

    def make(self, point):
        """The schedule parameters of ``point``."""
        return self._make(point)

    def neighbour(self, index, rng, tries=64):
        """A valid index that differs from ``index`` in one knob (AutoTVM's random walk), or ``index``."""
        self.valid()
        for _ in range(tries):
            k = rng.integers(len(self.knobs))
            radix, stride = len(self.knobs[k].values), self._strides[k]
            digit = index // stride % radix
            moved = index + (int(rng.integers(radix)) - digit) * stride     # (the k-th digit replaced)
            if moved != index and moved in self._valid_set:
                return moved
        return index
