"""Functional simulator: the reference semantics of the accelerator.

The simulator runs an instruction stream the way the hardware does: fetch
decodes instructions in order and routes them to the load, compute and store
command queues; each stream executes its queue in order, popping dependency
tokens before an instruction and pushing them after. It is untimed but
bit-exact with the RTL: DRAM contents, error codes and the counters both
define are the same.

Each GEMM or ALU instruction is evaluated as a few batched numpy operations
over its loops and micro-ops (GEMM as floating-point matrix products, exact
for these operand widths), never as a Python loop per micro-op.

Budgets: fsim is software, so a run has a budget of operations
(``max_ops``: micro-ops of GEMM and ALU instructions, SRAM entries moved by
LOAD and STORE, one for anything else), checked before each instruction
starts; a run that would exceed it stops with :class:`BudgetError`, naming
the instruction, instead of computing for hours. GEMM and ALU instructions
larger than a chunk run a part of their loops at a time, in order, so memory
stays bounded whatever their loop counts (an error in any part is found
before the first part writes).

Scheduling: by default the compute stream runs whenever it can, then store,
then load. Any order gives the same result for a program whose tokens order
every conflicting access; running compute first makes FINISH execute as early
as the tokens allow, so work left unordered before FINISH is reported. Other
priorities (``priority=``) let tests show that results do not depend on the
order and how far one stream can run ahead of another. The order depends on
the instruction words, the config and the priority alone, so a program run
again on the same simulator replays the order its first run found instead
of stepping the queues and tokens again (a model runs its programs again and
again); a run that failed is not kept.
"""

import dataclasses
import functools
import hashlib
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from threadpoolctl import ThreadpoolController

from tilewright import isa
from tilewright.config import load_config
from tilewright.isa import Alu, AluOp, ErrorCode, Finish, Gemm, Load, MemType, Store, Stream, dram_end
from tilewright.semantics import alu as alu_op, requantize, wrap

from .dram import Dram

__all__ = ["FunctionalSimulator", "RunStats", "SimError", "ExecutionError", "DeadlockError",
           "ProtocolError", "BudgetError", "Blocked", "MAX_OPS"]

#: Default operation budget of one run (see the module docstring): about 100 times the largest layer
#: program the compiler makes (ResNet-18 on ``tiny``, batch 8), and a few minutes of fsim at most.
MAX_OPS = 1 << 28
#: Loop positions × micro-ops evaluated at once by a GEMM (bounds its index and product arrays) …
GEMM_CHUNK = 1 << 16
#: … and by an ALU instruction (whose micro-ops, when they reuse a destination, are ordered in waves).
ALU_CHUNK = 1 << 12


# -- errors ------------------------------------------------------------------

@dataclass(frozen=True)
class Blocked:
    """Why one stream cannot move: its next instruction and the queue it waits on."""
    stream: Stream
    index: int          # instruction index in the program
    insn: object
    queue: isa.Queue
    reason: str         # "pop" (queue empty) or "push" (queue full)

    def __str__(self):
        what = "waits for a token on" if self.reason == "pop" else "waits for room in"
        return (f"{self.stream.name.lower()} stream: instruction {self.index} "
                f"({type(self.insn).__name__.upper()}) {what} {self.queue.name.lower()}")


class SimError(Exception):
    """A run that stopped with an error code.

    Attributes: ``code`` (:class:`~tilewright.isa.ErrorCode`), ``message``,
    ``index`` (instruction index or None), ``stream`` (or None), ``stats``
    (counters up to the stop).
    """

    def __init__(self, code, message, *, index=None, stream=None):
        super().__init__(message)
        self.code = None if code is None else ErrorCode(code)
        self.message, self.index, self.stream = message, index, stream
        self.stats = None

    def __str__(self):
        where = "" if self.index is None else f"instruction {self.index}: "
        return f"{self.code.name if self.code is not None else 'BUDGET'}: {where}{self.message}"


class ExecutionError(SimError):
    """An instruction that fetch or a unit rejected (illegal encoding, range, bus)."""


class DeadlockError(SimError):
    """Every stream waits on a token queue; ``blocked`` lists each waiting stream."""

    def __init__(self, message, blocked, **kw):
        self.blocked = blocked
        super().__init__(ErrorCode.DEADLOCK, message + "".join(f"\n  {b}" for b in blocked), **kw)


class BudgetError(SimError):
    """fsim's own limit, not the hardware's (``code`` is None): the run would spend more operations than its
    budget (``max_ops``)."""

    def __init__(self, message, **kw):
        super().__init__(None, message, **kw)


class ProtocolError(SimError):
    """Tokens left over or streams not drained at FINISH, or no FINISH at all."""

    def __init__(self, message, blocked=(), **kw):
        self.blocked = list(blocked)
        super().__init__(ErrorCode.PROTOCOL, message + "".join(f"\n  {b}" for b in blocked), **kw)


# -- counters ----------------------------------------------------------------

def _per_kind(kinds):
    return field(default_factory=lambda: dict.fromkeys(kinds, 0))


@dataclass
class RunStats:
    """Counters of one run (also defined, with the same meaning, by the RTL)."""
    dram_bytes_read: dict = _per_kind(("insn", "uop", "inp", "wgt", "acc", "acc8"))
    dram_bytes_written: dict = _per_kind(("out",))
    gemm_uops: int = 0
    alu_uops: int = 0
    instructions: dict = _per_kind(("load", "compute", "store"))

    @property
    def total_bytes_read(self):
        return sum(self.dram_bytes_read.values())

    @property
    def total_bytes_written(self):
        return sum(self.dram_bytes_written.values())

    def as_dict(self):
        return dataclasses.asdict(self)


# -- the simulator -----------------------------------------------------------

def _int_dtype(bits):
    return np.dtype(f"<i{bits // 8}")


#: The most 8-bit products a float32 sum holds exactly: each is at most 2**14 in magnitude, and every partial
#: sum stays within float32's 24-bit significand.
EXACT_FLOAT32_TERMS = 1 << 10


def _exact_matmul(a, b):
    """``a @ b`` of integer-valued floats ``a`` (…, K) and ``b`` (…, K, N), exactly: in float32 a sum of at most
    :data:`EXACT_FLOAT32_TERMS` products, so a longer one as that many float32 products over slices of K,
    added in float64 (two to three times as fast as one float64 product)."""
    K = a.shape[-1]
    if a.dtype != np.float32 or K <= EXACT_FLOAT32_TERMS:
        return np.matmul(a, b)
    parts = -(-K // EXACT_FLOAT32_TERMS)
    step = -(-K // parts)
    total = np.matmul(a[..., :step], b[..., :step, :]).astype(np.float64)
    for start in range(step, K, step):
        total += np.matmul(a[..., start:start + step], b[..., start:start + step, :])
    return total


@functools.lru_cache(maxsize=1 << 16)
def _decoded(word, cfg):
    """``(instruction, None, pops, pushes)`` for a legal 16-byte ``word`` (the token queues it pops before and
    pushes after it runs), or ``(None, (code, message), (), ())`` for one fetch refuses. Cached: a model runs
    the same programs again and again."""
    try:
        insn = isa.decode(word, cfg)
    except isa.IllegalInstruction as e:
        return None, (e.code, str(e)), (), ()
    problem = isa.fetch_error(insn)
    if problem:
        return insn, problem, (), ()
    pops = tuple(isa.queue_of(insn.stream, f) for f in ("pop_prev", "pop_next") if getattr(insn, f))
    pushes = tuple(isa.queue_of(insn.stream, f) for f in ("push_prev", "push_next") if getattr(insn, f))
    return insn, None, pops, pushes


class FunctionalSimulator:
    """Bit-exact functional model of one accelerator instance.

    Parameters
    ----------
    config : HwConfig or str
        Config or preset name / TOML path.
    dram_bytes : int
        Size of the simulated DRAM.
    priority : sequence of Stream
        Order in which runnable streams are stepped (compute, store, load).
    max_ops : int
        Operations one run may spend (see the module docstring).

    Attributes
    ----------
    dram : Dram
        Memory shared by host and accelerator.
    executed : list of int
        Instruction indices of the last run, in execution order.
    """

    def __init__(self, config="default", *, dram_bytes=256 << 20,
                 priority=(Stream.COMPUTE, Stream.STORE, Stream.LOAD), max_ops=MAX_OPS):
        if not (isinstance(max_ops, int) and max_ops > 0):
            raise ValueError(f"max_ops must be a positive integer, not {max_ops!r}")
        self.cfg = load_config(config)
        self.max_ops = max_ops
        self.dram = Dram(dram_bytes)
        self.priority = tuple(Stream(s) for s in priority)
        if sorted(self.priority) != list(Stream):
            raise ValueError(f"priority must order every stream once, not {priority!r}")
        self.executed = []
        c = self.cfg
        # inp and wgt are kept as floats so GEMM feeds BLAS without a conversion; they only ever hold
        # integers of inp/wgt width. With 8-bit operands float32, whose products sum exactly while a
        # reduction has at most EXACT_FLOAT32_TERMS of them (twice as fast as float64); else float64.
        floats = np.float32 if max(c.inp_width, c.wgt_width) <= 8 else np.float64
        self._inp = np.zeros((c.inp_depth, c.batch, c.block_in), dtype=floats)
        self._wgt = np.zeros((c.wgt_depth, c.block_out, c.block_in), dtype=floats)
        # acc and out hold exactly acc_width / out_width bits: storing into
        # them wraps (truncates) as semantics.wrap / semantics.narrow define.
        self._acc = np.zeros((c.acc_depth, c.batch, c.block_out), dtype=_int_dtype(c.acc_width))
        self._out = np.zeros((c.acc_depth, c.batch, c.block_out), dtype=_int_dtype(c.out_width))
        self._uop = np.zeros((3, c.uop_depth), dtype=np.int64)    # dst, src, wgt
        self._uop_fields = isa.uop_format(c).fields
        self._wgt_version, self._weight_cache = 0, {}
        self._plans = {}            # (micro-ops' digest, GEMM/ALU instruction's encoding) -> plan
        self._uop_key = hashlib.blake2b(self._uop.tobytes(), digest_size=16).digest()
        self._transfer_plans = {}   # LOAD/STORE instruction's encoding -> plan (see _new_transfer_plan)
        self._transfer_dram = self.dram.data       # the DRAM array the plans view
        self._program = None        # byte range of the running program's instructions, if run from DRAM
        self._orders = {}           # (program, priority) -> the order its instructions ran in (see _execute)
        self._depth = {mem: c.depth(mem) for mem in ("uop", "inp", "wgt", "acc", "out")}
        self.stats = RunStats()

    # -- inspection ----------------------------------------------------------

    def sram(self, name):
        """A copy of SRAM ``name`` (``uop``, ``inp``, ``wgt``, ``acc``, ``out``) as integers.

        ``uop`` is returned as an ``(depth, 3)`` array of (dst, src, wgt).
        """
        c = self.cfg
        return {
            "uop": lambda: self._uop.T.copy(),
            "inp": lambda: self._inp.astype(_int_dtype(c.inp_width)),
            "wgt": lambda: self._wgt.astype(_int_dtype(c.wgt_width)),
            "acc": lambda: self._acc.copy(),
            "out": lambda: self._out.copy(),
        }[name]()

    # -- running -------------------------------------------------------------

    def run(self, program):
        """Run a list of instructions (or their encoded bytes) until FINISH.

        The instructions are encoded and decoded as fetch would read them
        from DRAM. Returns the :class:`RunStats` of the run; raises a
        :class:`SimError` subclass carrying the error code on failure.
        """
        self._program = None        # (not in DRAM: no STORE can reach it)
        return self._run_words(program)

    def _run_words(self, program):
        data = program if isinstance(program, (bytes, bytearray)) else isa.encode_program(program, self.cfg)
        if len(data) % isa.INSN_BYTES:
            raise isa.IsaError(f"instruction stream of {len(data)} bytes is not a multiple of {isa.INSN_BYTES}")
        key = (bytes(data), self.priority)
        order = self._orders.get(key)
        with _ONE_BLAS_THREAD:
            if order is not None:
                return self._replay(order)
            words = [bytes(data[i:i + isa.INSN_BYTES]) for i in range(0, len(data), isa.INSN_BYTES)]
            stats, order = self._execute(words)
        if len(self._orders) >= 256:
            self._orders.clear()
        self._orders[key] = order
        return stats

    def run_dram(self, insn_addr, insn_count):
        """Run ``insn_count`` instructions stored in DRAM at byte address ``insn_addr``.

        The address must be 16-byte aligned and the instructions inside DRAM,
        else the run stops with ``BUS_ERROR`` before it starts. The instructions
        are read once, before the run; a STORE whose DRAM rows reach into them
        stops the run with ``STORE_OVER_PROGRAM`` before it writes (the RTL
        fetches while the streams run, so the program must not change under it).
        """
        if insn_addr % isa.INSN_BYTES:
            raise ExecutionError(ErrorCode.BUS_ERROR,
                                 f"instruction address {insn_addr:#x} is not {isa.INSN_BYTES}-byte aligned")
        try:
            data = self.dram.read(insn_addr, insn_count * isa.INSN_BYTES).tobytes()
        except ValueError as e:
            raise ExecutionError(ErrorCode.BUS_ERROR, f"instruction fetch: {e}") from None
        self._program = (insn_addr, insn_addr + len(data))
        return self._run_words(data)

    def _start(self):
        """Fresh counters and store registers for a run."""
        if self._transfer_dram is not self.dram.data:      # (the plans' views are of that array)
            self._transfer_plans.clear()
            self._transfer_dram = self.dram.data
        self.stats = RunStats()
        self._bias = np.zeros(self._acc.shape[1:], dtype=np.int64)   # the store stream's bias register
        # and its scale register (per_channel_store; None without it: mul = 0 then multiplies by 0)
        self._scale = self._bias.copy() if self.cfg.per_channel_store else None
        self.executed = []
        return self.stats

    def _execute(self, words):
        """Run ``words`` through the fetch, command queues and tokens; returns the stats and, for
        :meth:`_replay`, the order the instructions ran in (a list of :class:`_Step`). The order depends on
        the words, the config and ``priority`` alone (no data steers it)."""
        stats = self._start()
        order = []
        depth_cmd, depth_tok = self.cfg.cmd_queue_slots, self.cfg.token_queue_depth
        cmd = {s: deque() for s in Stream}         # (index, insn, queues it pops, queues it pushes) per stream
        tokens = dict.fromkeys(isa.Queue, 0)
        pc, fetched = 0, None                      # fetched: decoded, waiting for queue room
        spent = 0                                  # operations of the budget

        def blocker(stream, index, insn, pops, pushes):
            for q in pops:
                if tokens[q] == 0:
                    return Blocked(stream, index, insn, q, "pop")
            for q in pushes:
                if tokens[q] >= depth_tok:
                    return Blocked(stream, index, insn, q, "push")
            return None

        def all_blocked():
            return [blocker(s, *cmd[s][0]) for s in Stream if cmd[s]]

        try:
            while True:
                # Fetch in order while the next instruction's queue has room.
                while fetched is not None or pc < len(words):
                    if fetched is None:
                        fetched = (pc, *self._fetch(words[pc], pc))
                        stats.dram_bytes_read["insn"] += isa.INSN_BYTES
                        pc += 1
                    stream = fetched[1].stream
                    if len(cmd[stream]) >= depth_cmd:
                        break
                    cmd[stream].append(fetched)
                    fetched = None
                # Step the first stream (compute, store, load) that can move.
                for stream in self.priority:
                    if cmd[stream] and blocker(stream, *cmd[stream][0]) is None:
                        break
                else:
                    if fetched is None and pc == len(words) and not any(cmd.values()):
                        raise ProtocolError("the program ended without FINISH")
                    msg = "every stream is blocked"
                    if fetched is not None:
                        msg += (f"; fetch stalled at instruction {fetched[0]}: the "
                                f"{fetched[1].stream.name.lower()} command queue is full ({depth_cmd})")
                    raise DeadlockError(msg, all_blocked())
                index, insn, pops, pushes = cmd[stream].popleft()
                for q in pops:
                    tokens[q] -= 1
                step = _Step(index, insn, words[index], stream, stream.name.lower(), pc, _cost(insn),
                             _EXECUTES.get(type(insn)))
                order.append(step)
                spent = self._step(step, spent)
                for q in pushes:
                    tokens[q] += 1
                if isinstance(insn, Finish):
                    self._check_finish(index, cmd, tokens, pc, fetched, len(words), all_blocked)
                    return stats, order
        except SimError as e:
            e.stats = stats
            raise

    def _replay(self, order):
        """Run a program again in the order :meth:`_execute` found for it (the same instructions, counters
        and errors, without stepping the queues and tokens again)."""
        stats, spent = self._start(), 0
        try:
            for step in order:
                stats.dram_bytes_read["insn"] = step.fetched * isa.INSN_BYTES
                spent = self._step(step, spent)
        except SimError as e:
            e.stats = stats
            raise
        return stats

    def _step(self, step, spent):
        """Execute one :class:`_Step` with ``spent`` operations of the budget used; returns the new total."""
        index, insn, word, stream, name, _, cost, execute = step
        self.stats.instructions[name] += 1
        self.executed.append(index)
        try:
            if spent + cost > self.max_ops:
                raise BudgetError(f"{insn.OPCODE.name} needs {cost:,} operations; the run has spent "
                                  f"{spent:,} of its budget of {self.max_ops:,} (max_ops)")
            if execute:
                getattr(self, execute)(insn, word)
        except SimError as e:
            e.index, e.stream = index, stream
            raise
        return spent + cost

    def _check_finish(self, index, cmd, tokens, pc, fetched, count, all_blocked):
        problems = []
        left = {q.name.lower(): n for q, n in tokens.items() if n}
        if left:
            problems.append("tokens left over: " + ", ".join(f"{q}={n}" for q, n in left.items()))
        pending = {s.name.lower(): sum(entry[0] < index for entry in q) for s, q in cmd.items()}
        if any(pending.values()):
            problems.append("streams not drained: " + ", ".join(
                f"{s} has {n} instruction(s) pending" for s, n in pending.items() if n))
        after = count - index - 1
        if after:
            problems.append(f"{after} instruction(s) after FINISH")
        if problems:
            raise ProtocolError("FINISH with " + "; ".join(problems),
                                [b for b in all_blocked() if b and b.index < index],
                                index=index, stream=Stream.COMPUTE)

    def _fetch(self, word, index):
        """``(insn, queues it pops, queues it pushes)`` for the word at ``index``, or the fetch error."""
        insn, problem, pops, pushes = _decoded(word, self.cfg)
        if problem:
            raise ExecutionError(*problem, index=index)
        return insn, pops, pushes

    # -- LOAD / STORE --------------------------------------------------------

    def _check_sram(self, insn, buffer):
        depth = self._depth[buffer]
        if insn.sram_base + insn.sram_extent > depth:
            raise ExecutionError(ErrorCode.SRAM_RANGE,
                                 f"{type(insn).__name__.upper()} {insn.memory_type.name} touches "
                                 f"{buffer} entries [{insn.sram_base}, {insn.sram_base + insn.sram_extent}) "
                                 f"but the buffer has {depth}")

    def _dram_rows(self, insn, elem):
        """A strided (y_size, x_size·elem) byte view of the DRAM rows ``insn`` moves."""
        start = insn.dram_base * elem
        end = dram_end(insn) * elem
        if end > self.dram.size:
            raise ExecutionError(ErrorCode.BUS_ERROR,
                                 f"DRAM bytes [{start:#x}, {end:#x}) outside memory of {self.dram.size:#x}")
        return np.lib.stride_tricks.as_strided(
            self.dram.data[start:], shape=(insn.y_size, insn.x_size * elem),
            strides=(insn.x_stride * elem, 1), writeable=True)

    def _load(self, insn, key):
        if insn.moves_nothing:
            return
        plan = self._transfer_plans.get(key)
        if plan is None:
            plan = self._new_transfer_plan(insn, key, self._load_plan)
        mt, data, padding, rows, target = plan
        self.stats.dram_bytes_read[mt.dram_elem] += data.nbytes
        if target is None:          # micro-ops
            block = np.zeros(padding[0], dtype=data.dtype) if padding else data
            if padding:
                block[padding[1]] = data
            words = block.reshape(rows.stop - rows.start, -1)[:, 0].astype(np.uint64)
            for k, f in enumerate(self._uop_fields):
                self._uop[k, rows] = ((words >> np.uint64(f.offset)) & np.uint64((1 << f.width) - 1)).astype(np.int64)
            self._uop_key = hashlib.blake2b(self._uop.tobytes(), digest_size=16).digest()
            return
        self._wgt_version += target is self._wgt
        # straight from DRAM into the SRAM rows (converted on the way), the padding zeroed around it
        if padding:
            entries = target[rows].reshape(padding[0])
            entries[...] = 0
            entries[padding[1]] = data
        else:
            target[rows].reshape(data.shape)[...] = data

    def _new_transfer_plan(self, insn, key, make):
        """The plan ``make(insn)`` of a LOAD or STORE, cached under its encoding ``key`` (range-checked once: a
        DRAM view and the SRAM rows depend on the instruction alone, and a model runs the same instructions
        again and again)."""
        if len(self._transfer_plans) >= 1 << 17:
            self._transfer_plans.clear()
        plan = self._transfer_plans[key] = make(insn)
        return plan

    def _load_plan(self, insn):
        """``(memory type, DRAM data (y_size, x_size, scalars per entry), padding or None, SRAM rows, target
        buffer or None)``; padding is ``((sram_rows, sram_cols, scalars per entry), where the data lies)``."""
        mt, c = insn.memory_type, self.cfg
        buffer = mt.buffer
        self._check_sram(insn, buffer)
        data = self._dram_rows(insn, c.elem_bytes(mt.dram_elem)).view(self._dram_dtype(mt))
        data = data.reshape(insn.y_size, insn.x_size, -1)
        padding = None
        if insn.sram_extent != insn.y_size * insn.x_size:
            padding = ((insn.sram_rows, insn.sram_cols, data.shape[2]),
                       (slice(insn.y_pad0, insn.y_pad0 + insn.y_size), slice(insn.x_pad0, insn.x_pad0 + insn.x_size)))
        rows = slice(insn.sram_base, insn.sram_base + insn.sram_extent)
        target = None if mt == MemType.UOP else {"inp": self._inp, "wgt": self._wgt, "acc": self._acc}[buffer]
        return mt, data, padding, rows, target

    def _dram_dtype(self, mt):
        """numpy dtype of one scalar of memory type ``mt`` in DRAM."""
        c = self.cfg
        if mt == MemType.UOP:
            return np.dtype(f"<u{c.elem_bytes('uop')}")
        bits = {MemType.ACC8: 8, MemType.INP: c.inp_width, MemType.WGT: c.wgt_width,
                MemType.ACC: c.acc_width, MemType.OUT: c.out_width}[mt]
        return _int_dtype(bits)

    def _store(self, insn, key):
        if insn.set_bias:
            if insn.sram_base >= self.cfg.acc_depth:
                raise ExecutionError(ErrorCode.SRAM_RANGE, f"STORE set_bias reads acc entry {insn.sram_base} "
                                                           f"but the buffer has {self.cfg.acc_depth}")
            if insn.requant and self._scale is not None:
                self._scale = self._acc[insn.sram_base].copy()
            else:
                self._bias = self._acc[insn.sram_base].copy()
            return
        if insn.moves_nothing:
            return
        plan = self._transfer_plans.get(key)
        if plan is None:
            plan = self._new_transfer_plan(insn, key, self._store_plan)
        rows, span, (start, end) = plan
        if self._program and start < self._program[1] and end > self._program[0]:
            raise ExecutionError(ErrorCode.STORE_OVER_PROGRAM,
                                 f"STORE writes DRAM bytes [{start:#x}, {end:#x}), which reach into the program's "
                                 f"instructions [{self._program[0]:#x}, {self._program[1]:#x})")
        data = requantize(self._acc[span], insn.mul, insn.shift, insn.relu, acc_width=self.cfg.acc_width,
                          out_width=self.cfg.out_width, bias=self._bias if insn.bias else 0, scale=self._scale) \
            if insn.requant else self._out[span]
        data = data.astype(data.dtype.newbyteorder("<"), copy=False).view(np.uint8).reshape(insn.y_size, -1)
        if insn.x_stride >= insn.x_size:
            rows[...] = data
        else:   # overlapping rows: later rows win, as the hardware writes them in order
            for r in range(insn.y_size):
                rows[r] = data[r]
        self.stats.dram_bytes_written["out"] += data.size

    def _store_plan(self, insn):
        """``(DRAM view, acc/out rows, DRAM byte range)`` of a STORE that moves data."""
        self._check_sram(insn, "out")
        elem = self.cfg.elem_bytes("out")
        return (self._dram_rows(insn, elem), slice(insn.sram_base, insn.sram_base + insn.y_size * insn.x_size),
                (insn.dram_base * elem, dram_end(insn) * elem))

    # -- GEMM / ALU ----------------------------------------------------------
    #
    # Index work depends only on an instruction and the micro-ops it uses, and
    # the same instructions recur (one per tile), so each GEMM/ALU instruction
    # becomes a plan of row selections once, cached with a digest of the
    # micro-op buffer it read (a model's programs load the same micro-ops
    # run after run); running a plan is only gathers, matrix products and
    # stores. A plan is built (and its range errors raised) before anything
    # is written.

    def _plan(self, insn, word):
        """The cached plan of GEMM/ALU ``insn`` (encoded as ``word``) on the micro-ops loaded now."""
        key = (self._uop_key, word)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._gemm_plan(insn) if isinstance(insn, Gemm) else self._alu_plan(insn)
            if len(self._plans) >= 4096:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def _loop_indices(self, insn, fields, part=None):
        """Micro-op columns and loop strides of a GEMM/ALU instruction, range-checked.

        Returns ``{name: _Index}`` for each requested index (``dst``,
        ``src``, ``wgt``) mapped to the buffer it addresses; of the loop
        positions ``part`` (a :func:`_parts` tuple) only, if given.
        """
        c = self.cfg
        if insn.uop_bgn > insn.uop_end or insn.uop_end > c.uop_depth:
            raise ExecutionError(ErrorCode.UOP_RANGE,
                                 f"micro-ops [{insn.uop_bgn}, {insn.uop_end}) outside the uop buffer "
                                 f"of {c.uop_depth} or reversed")
        result = {}
        for name, buffer in fields.items():
            row = {"dst": 0, "src": 1, "wgt": 2}[name]
            f_out, f_in = getattr(insn, f"{name}_factor_out"), getattr(insn, f"{name}_factor_in")
            uops = self._uop[row, insn.uop_bgn:insn.uop_end]
            if part is None:
                index = _Index(uops, insn.iter_out, insn.iter_in, f_out, f_in)
            else:
                o0, n_out, i0, n_in = part
                index = _Index(uops + o0 * f_out + i0 * f_in, n_out, n_in, f_out, f_in)
            if index.top >= self._depth[buffer]:
                raise ExecutionError(ErrorCode.INDEX_RANGE,
                                     f"{type(insn).__name__.upper()} {name} index reaches {index.top}, "
                                     f"beyond the {buffer} buffer of {self._depth[buffer]}")
            result[name] = index
        return result

    def _write_acc(self, rows, values):
        """acc[rows] = values and OUT[rows] = values, each truncated to its width."""
        self._acc[rows] = values
        self._out[rows] = values

    def _gemm(self, insn, key):
        if insn.uop_count <= GEMM_CHUNK:
            self._run_gemm(self._plan(insn, key))
        else:       # range-checked whole, then run a part of the loops at a time
            self._loop_indices(insn, {"dst": "acc"} if insn.reset else {"dst": "acc", "src": "inp", "wgt": "wgt"})
            for part in _parts(insn, GEMM_CHUNK):
                self._run_gemm(self._gemm_plan(insn, part))
        self.stats.gemm_uops += insn.uop_count

    def _run_gemm(self, plan):
        if plan.reset:
            self._write_acc(plan.rows, 0)
            return
        if not (plan.groups or plan.by_weight):
            return
        if plan.by_weight:
            products = self._products_by_weight(*plan.by_weight)
        else:
            parts = [self._products(g, plan.by_group) for g in plan.groups]
            products = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0 if plan.by_group else 1)
        # (the accumulators' own type when every sum fits it: a sum wraps there as acc_width does)
        exact = self._acc.dtype if plan.fits_acc else np.int64
        products = products.astype(exact, order="C").reshape((-1,) + self._acc.shape[1:])
        if plan.overwrite:      # every micro-op overwrites: the last one on a row wins
            last = slice(None)
            if not plan.distinct:
                last = np.zeros(len(plan.rows), dtype=np.int64)
                np.maximum.at(last, plan.inverse, np.arange(plan.inverse.size))
            self._write_acc(plan.rows, products[last])
        elif plan.distinct and isinstance(plan.rows, slice) and plan.fits_acc:
            # in place, added as unsigned integers: the same bits as the wrapped signed sum
            acc = self._acc[plan.rows]
            unsigned = _unsigned(acc.dtype)
            np.add(acc.view(unsigned), products.view(unsigned), out=acc.view(unsigned))
            self._out[plan.rows] = acc
        elif plan.distinct:
            self._write_acc(plan.rows, _take(self._acc, plan.rows).astype(np.int64) + products)
        else:   # the same row accumulated several times in one instruction
            total = _take(self._acc, plan.rows).astype(np.int64)
            np.add.at(total, plan.inverse, products)
            self._write_acc(plan.rows, total)

    def _gemm_plan(self, insn, part=None):
        """Rows and operand selections of one GEMM instruction.

        Micro-ops are grouped by destination; each group's inputs and weights,
        over all loop positions, become one matrix product, and groups of
        equal size share one batched ``matmul``. Loops that move inputs and
        weights together would make most of such products wasted; those
        instructions multiply per weight instead (``by_weight``).
        """
        if insn.reset:
            dst = self._loop_indices(insn, {"dst": "acc"}, part)["dst"]
            return _GemmPlan(reset=True, rows=_rows(dst.all()))
        idx = self._loop_indices(insn, {"dst": "acc", "src": "inp", "wgt": "wgt"}, part)
        if not (idx["dst"].positions and idx["dst"].uops.size):
            return _GemmPlan()
        dst, src, wgt = idx["dst"], idx["src"], idx["wgt"]
        overwrite = insn.overwrite
        S, s_pos = src.distinct_offsets()
        W, w_pos = wgt.distinct_offsets()
        # A row written by several overwriting micro-ops keeps the last one's product, so each micro-op's own
        # product is needed (with distinct rows every group below is one micro-op, so overwriting is writing
        # its product); and loops that move inputs and weights together are multiplied per weight.
        if (overwrite and not _distinct(dst.all())) or S.size * W.size > 2 * dst.positions:
            rows = dst.all()
            return _GemmPlan(by_weight=(rows, src.all(), wgt.all()), overwrite=overwrite,
                             fits_acc=self._sums_fit_acc(self.cfg.block_in), **_scatter(rows))
        ud, us, uw = dst.uops, src.uops, wgt.uops
        if ud.min() == ud.max():            # the usual kernel: one reduction
            groups = [np.arange(ud.size)[None, :]]
        else:
            order = np.argsort(ud, kind="stable")
            _, starts, sizes = np.unique(ud[order], return_index=True, return_counts=True)
            groups = [order[starts[sizes == k][:, None] + np.arange(k)] for k in np.unique(sizes)]
        plans, rows = [], []
        # each loop position's own offsets (the usual case), so the products need no selection by position
        identity = bool(W.size == 1 and S.size == dst.positions and (s_pos == np.arange(S.size)).all())
        for members in groups:                                                   # (G, k)
            # Groups that read the same inputs (a tile's output channel blocks) share them: one product by
            # their weights side by side, a matrix as wide as the tile's channels instead of one block's.
            shared = len(members) > 1 and bool((us[members] == us[members][:1]).all())
            inp = us[members[:1] if shared else members][:, None, :] + S[None, :, None]    # (G or 1, nS, k)
            wgt_index = uw[members][:, None, :] + W[None, :, None]               # (G, nW, k)
            # (the shape is part of the weights' key: (1, 2, 1) and (1, 1, 2) indices have the same bytes)
            plans.append(_ProductGroup(_rows(inp.ravel()), inp.shape, wgt_index,
                                       (shared, wgt_index.shape, wgt_index.tobytes()), s_pos, w_pos, shared,
                                       identity))
            rows.append(dst.offsets()[:, None] + ud[members[:, 0]][None, :])     # (L, G)
        by_position = np.concatenate(rows, axis=1)
        # Products ordered group by group when that makes the destination one run of rows (a tile's channel
        # blocks stored one after another), which is accumulated in place.
        by_group = not isinstance(_rows(by_position.ravel()), slice) and isinstance(_rows(by_position.T.ravel()), slice)
        return _GemmPlan(groups=plans, overwrite=overwrite, by_group=by_group,
                         fits_acc=self._sums_fit_acc(max(g.inp_shape[2] for g in plans) * self.cfg.block_in),
                         **_scatter((by_position.T if by_group else by_position).ravel()))

    def _sums_fit_acc(self, terms):
        """True if every sum of ``terms`` products lies in the accumulators' range (so it needs no wider type
        on its way there)."""
        c = self.cfg
        return terms << (c.inp_width + c.wgt_width - 2) < 1 << (c.acc_width - 1)

    def _products(self, g, by_group=False):
        """Sums of one product group as floats: (L, G, batch, block_out), or (G, L, …) ``by_group``."""
        _, nS, k = g.inp_shape
        G, nW, _ = g.wgt_index.shape
        b = self.cfg.batch
        A = _take(self._inp, g.inp_rows).reshape(g.inp_shape + self._inp.shape[1:])    # (G or 1, nS, k, b, BI)
        A = A.transpose(0, 1, 3, 2, 4).reshape(len(A), nS * b, -1)
        P = _exact_matmul(A, self._weight_matrix(g))
        if g.shared:        # (1, nS·b, G·nW·BO): the groups side by side
            P = (P.reshape(nS, b, G, -1) if g.identity
                 else P.reshape(nS, b, G, nW, -1)[g.s_pos, :, :, g.w_pos, :])                   # (L, b, G, BO)
            return P.transpose((2, 0, 1, 3) if by_group else (0, 2, 1, 3))
        if g.identity:
            P = P.reshape(G, nS, b, -1)                                                          # (G, L, b, BO)
            return P if by_group else P.transpose(1, 0, 2, 3)
        P = P.reshape(G, nS, b, nW, -1)[:, g.s_pos, :, g.w_pos, :]                               # (L, G, b, BO)
        return P.transpose(1, 0, 2, 3) if by_group else P

    def _weight_matrix(self, g):
        """Weights of group ``g`` arranged as (G, k·BI, nW·BO) matmul operands, or for groups sharing their
        inputs as one (1, k·BI, G·nW·BO).

        The arrangement is a copy; consecutive GEMMs on the same weights (a
        weight-stationary schedule) reuse it until the next weight LOAD.
        """
        key = (self._wgt_version, g.wgt_key)
        if key not in self._weight_cache:
            if len(self._weight_cache) >= 4 or any(k[0] != key[0] for k in self._weight_cache):
                self._weight_cache.clear()
            G, nW, k = g.wgt_index.shape
            if g.shared:
                B = _take(self._wgt, g.wgt_index).transpose(2, 4, 0, 1, 3)             # (k, BI, G, nW, BO)
                self._weight_cache[key] = B.reshape(1, k * self.cfg.block_in, -1)
            else:
                B = _take(self._wgt, g.wgt_index).transpose(0, 2, 4, 1, 3)             # (G, k, BI, nW, BO)
                self._weight_cache[key] = B.reshape(G, k * self.cfg.block_in, -1)
        return self._weight_cache[key]

    def _products_by_weight(self, dst, src, wgt):
        """Products of every micro-op: one matrix product per distinct weight, or when most micro-ops have
        weights of their own (a dense layer's), one batched product of every micro-op's."""
        order = np.argsort(wgt, kind="stable")
        weights, starts = np.unique(wgt[order], return_index=True)
        if 4 * weights.size > wgt.size:     # (the copies of weights are then at most 4 per distinct one)
            return _exact_matmul(_take(self._inp, src), _take(self._wgt, wgt).transpose(0, 2, 1))
        out = np.empty((dst.size,) + self._acc.shape[1:])
        for w, sel in zip(weights, np.split(order, starts[1:])):
            out[sel] = _exact_matmul(_take(self._inp, src[sel]), self._wgt[w].T)
        return out

    def _alu(self, insn, key):
        c = self.cfg
        imm = wrap(insn.imm, c.acc_width)
        small = insn.uop_count <= ALU_CHUNK
        if not small:       # range-checked whole, then a part of the loops at a time
            self._loop_indices(insn, {"dst": "acc"} if insn.use_imm else {"dst": "acc", "src": "acc"})
        for part in [None] if small else _parts(insn, ALU_CHUNK):
            if insn.use_imm and insn.alu_op in _REPEATABLE:
                self._alu_repeated(insn, imm, part)
                continue
            for dst, src in self._plan(insn, key) if small else self._alu_plan(insn, part):
                b = imm if src is None else self._acc[src]
                self._write_acc(dst, alu_op(insn.alu_op, self._acc[dst], b, c.acc_width))
        self.stats.alu_uops += insn.uop_count

    def _alu_repeated(self, insn, imm, part):
        """An immediate MIN/MAX/ADD/MUL applied to each destination row as many times as the micro-ops name
        it, at once: ``k`` of them are one MIN or MAX, an ADD of ``k·imm`` or a MUL by ``imm**k`` (modulo
        2**acc_width, where the hardware's sums and products live)."""
        dst = self._loop_indices(insn, {"dst": "acc"}, part)["dst"]
        if not (dst.positions and dst.uops.size):
            return
        rows, times = np.unique(dst.all(), return_counts=True)
        bits, op = self.cfg.acc_width, insn.alu_op
        if op == AluOp.ADD:
            b = wrap(times * imm, bits)[:, None, None]
        elif op == AluOp.MUL:
            b = wrap(np.array([pow(int(imm), int(k), 1 << bits) for k in times], dtype=np.int64), bits)[:, None, None]
        else:
            b = imm
        self._write_acc(rows, alu_op(op, self._acc[rows], b, bits))

    def _alu_plan(self, insn, part=None):
        """``[(dst rows, src rows or None)]`` per wave of one ALU instruction (of loop positions ``part``)."""
        idx = self._loop_indices(insn, {"dst": "acc"} if insn.use_imm else {"dst": "acc", "src": "acc"}, part)
        if not (idx["dst"].positions and idx["dst"].uops.size):
            return []
        dst = idx["dst"].all()
        src = None if insn.use_imm else idx["src"].all()
        return [(_rows(dst[w]), None if src is None else _rows(src[w])) for w in _alu_waves(dst, src)]


@functools.lru_cache(maxsize=1 << 16)
def _cost(insn):
    """Operations ``insn`` spends of a run's budget: micro-ops (GEMM, ALU), SRAM entries moved (LOAD,
    STORE), at least one."""
    if isinstance(insn, (Gemm, Alu)):
        return max(1, insn.uop_count)
    if isinstance(insn, (Load, Store)) and not insn.moves_nothing:
        return max(1, insn.sram_extent)
    return 1


def _parts(insn, chunk):
    """A GEMM/ALU instruction's loop positions in execution order, as ``(o0, outer count, i0, inner
    count)`` parts of at most ``chunk`` positions × micro-ops each (or one position, if that has more)."""
    uops = max(1, insn.uop_end - insn.uop_bgn)
    if insn.iter_in * uops <= chunk:
        step = max(1, chunk // (insn.iter_in * uops))
        for o0 in range(0, insn.iter_out, step):
            yield o0, min(step, insn.iter_out - o0), 0, insn.iter_in
    else:
        step = max(1, chunk // uops)
        for o in range(insn.iter_out):
            for i0 in range(0, insn.iter_in, step):
                yield o, 1, i0, min(step, insn.iter_in - i0)


class _Step(NamedTuple):
    """One instruction as a run executed it (what a replay needs of it, worked out once)."""
    index: int
    insn: object
    word: bytes               # its encoding: the key of its cached plans (a hash cached, unlike the instruction's)
    stream: Stream
    name: str                 # the stream's name in the run's counters
    fetched: int              # instructions fetched when it ran
    cost: int                 # operations of the run's budget (see _cost)
    execute: str = None       # the method that executes it (none for FINISH)


#: The method that executes each kind of instruction.
_EXECUTES = {Load: "_load", Store: "_store", Gemm: "_gemm", Alu: "_alu"}


@dataclass(frozen=True)
class _ProductGroup:
    """Micro-op groups of equal size whose products form one batched matmul."""
    inp_rows: object          # slice or flat index array into inp
    inp_shape: tuple          # (G, nS, k), or (1, nS, k) when every group reads the same inputs (shared)
    wgt_index: np.ndarray     # (G, nW, k)
    wgt_key: tuple            # (shared, shape, bytes of wgt_index): the weight cache's key
    s_pos: np.ndarray         # loop position -> input offset index
    w_pos: np.ndarray         # loop position -> weight offset index
    shared: bool = False      # the groups differ in weights alone: one product with their weights side by side
    identity: bool = False    # one weight offset, and loop position p reads input offset p (no selection)


@dataclass(frozen=True)
class _GemmPlan:
    reset: bool = False
    overwrite: bool = False
    rows: object = None       # destination rows (slice or array), in product order
    distinct: bool = True     # no destination row repeats
    inverse: object = None    # product -> position in rows, when rows repeat
    groups: tuple = ()
    by_weight: tuple = None   # (dst, src, wgt) of every micro-op, for the fallback
    by_group: bool = False    # groups' products ordered (G, L) rather than (L, G) (see _gemm_plan)
    fits_acc: bool = False    # every sum lies in the accumulators' range


class _OneBlasThread:
    """While any simulator runs, numpy's BLAS runs on one thread: fsim's products are tile-sized, and a second
    BLAS thread, spinning between them, slows the copies that follow each product several times over (on the
    2-core machines this project is measured on, ResNet-18's input gathers took 88 ms an image with two
    threads, 11 ms with one). The first simulator of the process to start a run sets the limit and the last
    to finish restores what was there. (OpenBLAS may not take the limit from a thread other than the main
    one once the main thread has set one; results never depend on it.)"""

    def __init__(self):
        self._lock = threading.Lock()
        self._runs = 0
        self._controller = self._limit = None

    def __enter__(self):
        with self._lock:
            if not self._runs:
                if self._controller is None:
                    self._controller = ThreadpoolController()
                self._limit = self._controller.limit(limits=1, user_api="blas")
            self._runs += 1

    def __exit__(self, *exc):
        with self._lock:
            self._runs -= 1
            if not self._runs:
                self._limit.restore_original_limits()


_ONE_BLAS_THREAD = _OneBlasThread()


def _take(array, rows):
    """``array[rows]`` for a slice or an index array of rows (``np.take`` gathers whole rows several times
    as fast as indexing)."""
    return array[rows] if isinstance(rows, slice) else np.take(array, rows, axis=0)


def _unsigned(dtype):
    """The unsigned integer type of ``dtype``'s size (whose sums wrap, by definition)."""
    return np.dtype(f"<u{dtype.itemsize}")


def _scatter(dst):
    """How products land on destination rows: distinct rows, or unique rows and an inverse."""
    if _distinct(dst):
        return {"rows": _rows(dst)}
    rows, inverse = np.unique(dst, return_inverse=True)
    return {"rows": rows, "distinct": False, "inverse": inverse}


@dataclass(frozen=True)
class _Index:
    """One index of a GEMM/ALU loop nest: ``uops[u] + o·f_out + i·f_in``."""
    uops: np.ndarray
    iter_out: int
    iter_in: int
    f_out: int
    f_in: int

    @property
    def positions(self):
        return self.iter_out * self.iter_in

    @property
    def top(self):
        """Largest index reached (-1 if none)."""
        if not (self.uops.size and self.positions):
            return -1
        return int(self.uops.max()) + (self.iter_out - 1) * self.f_out + (self.iter_in - 1) * self.f_in

    def offsets(self):
        """Loop offset at each position, (o, i) in execution order."""
        o = np.arange(self.iter_out, dtype=np.int64)[:, None] * self.f_out
        return (o + np.arange(self.iter_in, dtype=np.int64)[None, :] * self.f_in).ravel()

    def all(self):
        """Every index, in execution order (o, i, then micro-op)."""
        return (self.offsets()[:, None] + self.uops[None, :]).ravel()

    def distinct_offsets(self):
        """``(values, position → value index)`` of the loop offsets, sorted."""
        O, I = self.iter_out, self.iter_in
        if self.f_in == 0 or I == 1:        # depends on the outer loop only (or none)
            n = O if self.f_out else 1
            return np.arange(n, dtype=np.int64) * self.f_out, np.repeat(np.arange(O) % n, I)
        if self.f_out == 0 or O == 1:       # inner loop only
            return np.arange(I, dtype=np.int64) * self.f_in, np.tile(np.arange(I), O)
        return np.unique(self.offsets(), return_inverse=True)


def _rows(indices):
    """``indices`` as a slice when they are consecutive and ascending (a cheap view)."""
    if isinstance(indices, slice) or indices.size == 0:
        return indices
    first = int(indices[0])
    if int(indices[-1]) - first == indices.size - 1 and (indices.size == 1 or (np.diff(indices) == 1).all()):
        return slice(first, first + indices.size)
    return indices


def _distinct(indices):
    """True if the (small, non-negative) ``indices`` has no repeated value."""
    return np.bincount(indices).max(initial=0) <= 1


#: ALU operations whose repetition with one immediate is one operation (see ``_alu_repeated``).
_REPEATABLE = (AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.MUL)

#: Rounds of the vectorised wave search before :func:`_chain_levels` takes over.
_WAVE_ROUNDS = 32


def _chain_levels(dst, src):
    """The waves :func:`_alu_waves` wants, found in one pass over the micro-ops in order: a micro-op goes one
    wave after the last writer of its destination and of its source, and no earlier than the last reader
    of its destination since that was written."""
    written, read = {}, {}              # row -> wave of its last write / latest wave reading it since
    level = np.empty(len(dst), dtype=np.int64)
    for u, d in enumerate(dst.tolist()):
        s = None if src is None else int(src[u])
        w = max(written.get(d, -1), -1 if s is None else written.get(s, -1)) + 1
        w = max(w, read.get(d, 0))
        level[u] = w
        if s is not None:
            read[s] = max(read.get(s, 0), w)
        written[d] = w
        read[d] = max(read.get(d, 0), w)
    return level


def _alu_waves(dst, src):
    """Micro-op positions grouped into waves that can each run as one vector op.

    Micro-ops run in order; a vector op reads all operands before writing.
    A micro-op must run in a later wave than an earlier one writing its
    destination or its source (RAW, WAW), and not in an earlier wave than an
    earlier one reading its destination (WAR). Returns a list of index
    arrays, in execution order.
    """
    n = dst.size
    reads_other = src is not None and np.any(np.isin(src, dst) & (src != dst))
    if not reads_other and _distinct(dst):
        return [slice(None)]
    pos = np.arange(n, dtype=np.int64)
    keys = np.sort(dst * n + pos)               # writes, by (address, position)

    def writer_before(addr):                    # last write to addr[v] strictly before v
        k = np.searchsorted(keys, addr * n + pos, side="left") - 1
        ok = (k >= 0) & (keys[np.maximum(k, 0)] // n == addr)
        return np.where(ok, keys[np.maximum(k, 0)] % n, -1)

    preds = [writer_before(dst)]
    war_from = war_to = np.empty(0, dtype=np.int64)
    if src is not None:
        preds.append(writer_before(src))
        k = np.searchsorted(keys, src * n + pos, side="right")     # next write to src[u] after u
        ok = (k < n) & (keys[np.minimum(k, n - 1)] // n == src)
        war_from, war_to = pos[ok], keys[k[ok]] % n
    level = np.zeros(n, dtype=np.int64)
    for _ in range(_WAVE_ROUNDS):       # each round settles one more level of the dependency chains
        new = np.zeros(n, dtype=np.int64)
        for p in preds:
            has = p >= 0
            new[has] = np.maximum(new[has], level[p[has]] + 1)
        np.maximum.at(new, war_to, level[war_from])
        if np.array_equal(new, level):
            break
        level = new
    else:               # long chains: one pass in micro-op order instead (linear, not rounds × micro-ops)
        level = _chain_levels(dst, src)
    order = np.argsort(level, kind="stable")
    bounds = np.flatnonzero(np.diff(level[order])) + 1
    return np.split(order, bounds)
