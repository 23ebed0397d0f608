"""Static checks run on every compiled Program.

* Pushes and pops balance on each of the four token queues.
* No order of the three streams can deadlock. Streams, command queues and
  token queues form a network of in-order processes over bounded FIFOs, in
  which whether a run can get stuck does not depend on the order steps are
  taken; so one abstract run of the protocol (no data) that reaches FINISH
  with every queue drained proves it for all interleavings.
* Every SRAM access (LOAD/STORE rectangles, GEMM/ALU indices over their
  loops, with the micro-ops the program loads) and every DRAM access stays
  in range.
"""

from collections import deque
from dataclasses import dataclass

import numpy as np

from tilewright import isa
from tilewright.isa import Alu, Finish, Gemm, Load, MemType, Queue, Store, Stream, dram_end

__all__ = ["CheckError", "CheckReport", "check"]


class CheckError(ValueError):
    """A program that would fail on the accelerator; the message names the instruction."""


@dataclass
class CheckReport:
    instructions: int
    tokens: dict         # queue name -> pushes (= pops)
    max_tokens: dict     # queue name -> most tokens held at once in the abstract run


def _balance(program):
    pushes, pops = dict.fromkeys(Queue, 0), dict.fromkeys(Queue, 0)
    for k, insn in enumerate(program.instructions):
        problem = isa.fetch_error(insn)
        if problem:
            raise CheckError(f"instruction {k}: {problem[1]}")
        for flag in isa.DEP_FLAGS:
            if getattr(insn, flag):
                q = isa.queue_of(insn.stream, flag)
                (pushes if flag.startswith("push") else pops)[q] += 1
    for q in Queue:
        if pushes[q] != pops[q]:
            raise CheckError(f"queue {q.name.lower()}: {pushes[q]} pushes but {pops[q]} pops")
    return {q.name.lower(): pushes[q] for q in Queue}


def _protocol(program):
    """Abstract run: fetch, command queues and token queues with their capacities."""
    cfg = program.config
    insns = program.instructions
    cmd = {s: deque() for s in Stream}
    tokens = dict.fromkeys(Queue, 0)
    peak = dict.fromkeys(Queue, 0)
    pc = 0
    while True:
        while pc < len(insns) and len(cmd[insns[pc].stream]) < cfg.cmd_queue_slots:
            cmd[insns[pc].stream].append(pc)
            pc += 1
        progressed = False
        for stream in Stream:
            while cmd[stream]:
                k = cmd[stream][0]
                insn = insns[k]
                pops = [isa.queue_of(stream, f) for f in ("pop_prev", "pop_next") if getattr(insn, f)]
                pushes = [isa.queue_of(stream, f) for f in ("push_prev", "push_next") if getattr(insn, f)]
                if any(tokens[q] == 0 for q in pops) or any(tokens[q] >= cfg.token_queue_depth for q in pushes):
                    break
                for q in pops:
                    tokens[q] -= 1
                for q in pushes:
                    tokens[q] += 1
                    peak[q] = max(peak[q], tokens[q])
                cmd[stream].popleft()
                progressed = True
                if isinstance(insn, Finish):
                    if any(cmd.values()) or pc < len(insns) or any(tokens.values()):
                        raise CheckError(f"FINISH (instruction {k}) is not the last thing to happen: "
                                         f"tokens {dict((q.name.lower(), n) for q, n in tokens.items() if n)}, "
                                         f"pending {[len(q) for q in cmd.values()]}")
                    return {q.name.lower(): n for q, n in peak.items()}
        if not progressed:
            heads = {s.name.lower(): cmd[s][0] for s in Stream if cmd[s]}
            raise CheckError(f"the streams can deadlock: next instructions {heads}, tokens "
                             f"{dict((q.name.lower(), n) for q, n in tokens.items())}")


def _ranges(program):
    cfg = program.config
    uops = np.zeros((cfg.uop_depth, 3), dtype=np.int64)
    fmt = isa.uop_format(cfg)
    words = np.asarray(program.uop_words, dtype=np.uint64)
    fields = [(f.offset, (1 << f.width) - 1) for f in fmt.fields]
    decoded = np.stack([(words >> np.uint64(off)) & np.uint64(mask) for off, mask in fields], axis=1).astype(np.int64) \
        if words.size else np.zeros((0, 3), dtype=np.int64)
    uop_seg = program.segments.get("uops")
    for k, insn in enumerate(program.instructions):
        where = f"instruction {k} ({type(insn).__name__.upper()})"
        if isinstance(insn, (Load, Store)):
            if insn.moves_nothing:
                continue
            buffer = insn.memory_type.buffer if isinstance(insn, Load) else "out"
            if insn.sram_base + insn.sram_extent > cfg.depth(buffer):
                raise CheckError(f"{where}: SRAM {buffer} [{insn.sram_base}, {insn.sram_base + insn.sram_extent}) "
                                 f"beyond {cfg.depth(buffer)}")
            elem = cfg.elem_bytes(insn.memory_type.dram_elem)
            end = dram_end(insn) * elem
            if insn.dram_base < 0 or end > program.dram_bytes:
                raise CheckError(f"{where}: DRAM bytes up to {end} beyond the program image ({program.dram_bytes})")
            if isinstance(insn, Load) and insn.memory_type == MemType.UOP:
                first = insn.dram_base - uop_seg.offset // elem
                block = np.zeros((insn.sram_extent, 3), dtype=np.int64)
                rows = decoded[first:first + insn.x_size]
                block[insn.x_pad0:insn.x_pad0 + len(rows)] = rows
                uops[insn.sram_base:insn.sram_base + insn.sram_extent] = block
        elif isinstance(insn, (Gemm, Alu)):
            if insn.uop_bgn > insn.uop_end or insn.uop_end > cfg.uop_depth:
                raise CheckError(f"{where}: micro-ops [{insn.uop_bgn}, {insn.uop_end}) outside the uop buffer")
            if insn.uop_count == 0:
                continue
            kernel = uops[insn.uop_bgn:insn.uop_end]
            checks = [("dst", 0, "acc")]
            if isinstance(insn, Gemm) and not insn.reset:
                checks += [("src", 1, "inp"), ("wgt", 2, "wgt")]
            if isinstance(insn, Alu) and not insn.use_imm:
                checks.append(("src", 1, "acc"))
            for name, col, buffer in checks:
                reach = (insn.iter_out - 1) * getattr(insn, f"{name}_factor_out") + \
                        (insn.iter_in - 1) * getattr(insn, f"{name}_factor_in")
                top = int(kernel[:, col].max()) + reach
                if top >= cfg.depth(buffer):
                    raise CheckError(f"{where}: {name} index reaches {top}, beyond the {buffer} buffer "
                                     f"({cfg.depth(buffer)})")


def check(program):
    """Raise :class:`CheckError` unless ``program`` is safe to run; returns a :class:`CheckReport`."""
    if not program.instructions or not isinstance(program.instructions[-1], Finish):
        raise CheckError("the program must end with FINISH")
    tokens = _balance(program)
    peak = _protocol(program)
    _ranges(program)
    return CheckReport(len(program.instructions), tokens, peak)
