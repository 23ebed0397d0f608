"""The compilation pipeline: schedule → loop IR → passes → Program.

Each step is a function from an :class:`~tilewright.compiler.ir.Function`
(and the config) to a new one; ``dump`` sees the IR after every step, so a
user debugging a schedule can print what each pass did.
"""

from tilewright.config import load_config

from .checker import check
from .lower import lower
from .passes import (codegen, fold_loops, fuse_requant, fuse_reset, inject_dma, inject_virtual_threads, lower_alu,
                     plan_storage, tensorize)

__all__ = ["PIPELINE", "build", "lower_to_ir"]

#: The passes after lowering, in order.
PIPELINE = [
    ("plan_storage", plan_storage),            # SRAM offsets and per-thread replicas; capacity checks
    ("inject_dma", inject_dma),                # dma_copy nests -> 2D strided DMA with padding
    ("tensorize", tensorize),                  # GEMM intrinsic nests -> GEMM micro-ops
    ("lower_alu", lower_alu),                  # alu epilogues -> in-place ALU operations
    ("fuse_requant", fuse_requant),            # requantize on the store path, concurrent with compute
    ("fold_loops", fold_loops),                # loops around GEMM/ALU -> iter_out/iter_in + micro-ops
    ("fuse_reset", fuse_reset),                # the first GEMM of a reduction overwrites: no reset pass
    ("inject_virtual_threads", inject_virtual_threads),   # latency hiding: interleave threads
]


def lower_to_ir(schedule, config="default", *, dump=None, stop_after=None):
    """The loop IR after lowering and the passes (up to ``stop_after``, a pass name)."""
    cfg = load_config(config)
    func = lower(schedule)
    if dump:
        dump("lower", func)
    for name, step in PIPELINE:
        func = step(func, cfg)
        if dump:
            dump(name, func)
        if name == stop_after:
            break
    return func


def build(schedule, config="default", *, dump=None, verify=True):
    """Compile ``schedule`` into a checked :class:`~tilewright.compiler.program.Program`.

    ``dump(pass_name, ir)`` is called after every step; the last call is
    ``dump("codegen", program)``.
    """
    cfg = load_config(config)
    func = lower_to_ir(schedule, cfg, dump=dump)
    program = codegen(func, cfg)
    if dump:
        dump("codegen", program)
    if verify:
        check(program)
    return program
