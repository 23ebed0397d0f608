"""Hardware configuration: the one place every accelerator parameter lives.

:class:`HwConfig` is read by the RTL generator, the functional simulator, the
ISA spec and the compiler alike, so a parameter is declared here once and
nowhere else. Buffers are sized in bytes, as VTA sizes them; depths (entries
per buffer) are derived.

Presets (ARCHITECTURE.md §2):

=========  ========  ==============================================
preset     GEMM      use
=========  ========  ==============================================
pico       1×1×1     the smallest that runs compiled models: Gowin GW1NR-9
tiny       1×4×4     fast unit tests, iCE40-class parts
small      1×8×8     CI RTL regressions
slim       1×8×8     ECP5-85F: small the small-FPGA way (lean loaders, two ALU lanes, the ALU requantizes)
compact    1×8×8     ECP5-45F: half small's accumulators, 40 products in logic
medium     1×16×16   ECP5-85F: built as slim is, its block RAM, 8 output lanes a cycle (gemm_lanes)
default    1×16×16   benchmarks; VTA's default buffer sizes
=========  ========  ==============================================
"""

import dataclasses
import hashlib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from . import isa

__all__ = ["ConfigError", "HwConfig", "PRESETS", "load_config"]


class ConfigError(ValueError):
    """An impossible or unreadable hardware configuration."""


def _is_pow2(n):
    return isinstance(n, int) and n > 0 and n & (n - 1) == 0


def _log2(n):
    return n.bit_length() - 1


#: Supported element widths; numpy and the RTL both use whole bytes.
_DATA_WIDTHS = {"inp_width": (8, 16), "wgt_width": (8, 16), "out_width": (8, 16), "acc_width": (16, 32)}

#: Upper bounds on the queue depths.
_DEPTH_LIMITS = {"token_queue_depth": 4096, "cmd_queue_depth": 4096}
#: The most GEMM products per cycle (batch·block_in·block_out): a 1×64×64 array, 16× the default preset.
MAX_PRODUCTS = 4096
_BUS_WIDTHS = (32, 64, 128, 256, 512)


def _option(default):
    """A parameter added after the fingerprint scheme: it enters the fingerprint only when not ``default``,
    so the configs that existed before it keep their fingerprints (and their compiled programs)."""
    return dataclasses.field(default=default, metadata={"option": True})


@dataclass(frozen=True)
class HwConfig:
    """Every parameter of one accelerator instance.

    Parameters
    ----------
    batch, block_in, block_out : int
        GEMM intrinsic shape: ``(batch × block_in) · (block_out × block_in)ᵀ``.
    inp_width, wgt_width, acc_width, out_width : int
        Signed integer widths in bits of input, weight, accumulator and output
        elements.
    uop_buffer_bytes, inp_buffer_bytes, wgt_buffer_bytes, acc_buffer_bytes : int
        On-chip buffer sizes. The output buffer shares the accumulator's index
        space (``acc_depth`` entries of ``out_width`` elements).
    token_queue_depth : int
        Capacity of each of the four dependency-token queues; a push onto a
        full queue stalls its stream.
    cmd_queue_depth : int
        Capacity of each stream's command queue; fetch stalls when the queue
        of the next instruction is full. 0 builds no queue: a stream holds
        the one instruction it executes (or waits to start) in a register,
        which the simulator and the compiler count as a queue of one
        (:attr:`cmd_queue_slots`).
    dram_bus_width : int
        AXI data width in bits.
    soft_products : int
        How many of the GEMM's ``batch·block_out·block_in`` products are built
        from logic (shift-and-add) instead of DSP blocks, for FPGAs whose DSPs
        run out. The results are the same.
    vector_lanes : int
        Accumulator lanes the ALU and the requantizing STORE process per
        cycle; 0 (the default) builds one per lane (``batch·block_out``).
        With fewer, a power of two that divides ``batch·block_out``, an ALU
        micro-op takes ``batch·block_out / vector_lanes`` cycles and so does
        each element of a requantizing STORE, in that much less logic and
        as many fewer DSP blocks. The results are the same.
    gemm_lanes : int
        Output lanes (of ``block_out``) the GEMM computes per cycle; 0 (the
        default) builds all of them. With fewer, a power of two that divides
        ``block_out``, a GEMM micro-op takes ``block_out / gemm_lanes``
        cycles (one pass per group of lanes, a resetting micro-op one), in
        ``batch·block_in·gemm_lanes`` products instead of
        ``batch·block_in·block_out``: for FPGAs whose DSP blocks, or whose
        routing, a full array overruns. The results are the same.
    lean : bool
        Area before speed, for small FPGAs whose memory serves one burst at
        a time anyway: the LOADs of the load and compute streams take turns
        on one DMA engine (a LOAD never waits on a token once started); a
        requantizing STORE reads the accumulators through the ALU's second
        read port, between ALU instructions, instead of a third port of its
        own; the LOAD/STORE range checks multiply one bit per cycle; DMA
        transfers use bursts of at most 16 beats, split by simpler logic.
        Programs run the same, in more cycles.
    serial_mul : bool
        The ALU's MUL adds one partial product a cycle (``acc_width`` cycles
        per slice of lanes) in an adder instead of multiplying in DSP blocks:
        for parts whose DSPs the GEMM takes (the iCE40UP5K's 8). The results
        are the same.
    serial_core : bool
        The GEMM and the ALU run one micro-op at a time and one accumulator
        lane at a time (:class:`tilewright.hw.serial_core.SerialCore`):
        ``block_in`` products, a one-lane ALU in one adder, one accumulator
        read port and no forwarding or hazard logic, for parts too small for
        the pipelined core (the iCE40UP5K). A GEMM micro-op takes
        ``batch·block_out`` cycles and about eight more, an ALU micro-op
        about six a lane (a SHR a cycle a bit, a MUL ``acc_width`` cycles,
        with ``serial_mul`` or not). Needs ``vector_lanes = 1`` and no
        ``soft_products``. The results are the same.
    slow_clock : bool
        Build for a clock of tens of MHz (the small parts), where each
        flip-flop takes a logic cell: without the skid buffers that cut the
        DMA channels' timing paths at 100 MHz on the larger parts (after the
        burst splitters on AR and AW; with ``lean``, on the beats a reader
        hands out and the elements a loader takes), without ``requant_store``
        the STORE's elements straight from the output buffer to the DRAM
        writer (no register, no FIFO), the LOAD/STORE range checks in one
        adder, and register writes from the host applied as they are taken.
        Programs run the same, in a few cycles more or less.
    requant_store : bool
        Build the requantizing STORE (:class:`tilewright.isa.Store`'s
        ``requant``, ``set_bias`` and their fields). Without it those fields
        do not exist on this config (their bits are reserved: setting one is
        ``RESERVED_BITS``), and the compiler requantizes with ALU
        instructions before a plain STORE: the same outputs, in fewer DSP
        blocks and less logic, and the ALU busier.
    store_scale : bool
        With ``requant_store``: the requantizing STORE also requantizes per
        channel, ``clip((acc · scale + bias) >> shift)`` with ``scale`` a
        per-lane register (a ``set_bias`` STORE with ``requant`` loads it,
        ``mul = 0`` selects it), so the per-channel multiply leaves the
        compute stream. It costs each requantizing lane a 32-bit multiplier
        operand (16×32 products where 16×16 did) and the register. Without it
        those two encodings keep their plain meaning (``mul = 0`` multiplies
        by 0; ``set_bias`` loads the bias register) and the compiler
        multiplies per channel on the ALU.
    perf_counters : bool
        Build the performance counters (:data:`tilewright.hw.regs.COUNTERS`).
        Without them only ``cycles`` counts, the other counter registers read
        0, and run stats hold the cycle count alone; programs run the same.
    name : str
        Label only; not part of equality or the fingerprint.
    """

    batch: int = 1
    block_in: int = 16
    block_out: int = 16
    inp_width: int = 8
    wgt_width: int = 8
    acc_width: int = 32
    out_width: int = 8
    uop_buffer_bytes: int = 32 * 1024
    inp_buffer_bytes: int = 32 * 1024
    wgt_buffer_bytes: int = 256 * 1024
    acc_buffer_bytes: int = 128 * 1024
    token_queue_depth: int = 256
    cmd_queue_depth: int = 512
    dram_bus_width: int = 128
    soft_products: int = _option(0)
    vector_lanes: int = _option(0)
    gemm_lanes: int = _option(0)
    perf_counters: bool = _option(True)
    requant_store: bool = _option(True)
    store_scale: bool = _option(True)
    serial_mul: bool = _option(False)
    lean: bool = _option(False)
    serial_core: bool = _option(False)
    slow_clock: bool = _option(False)
    name: str = dataclasses.field(default="custom", compare=False)

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "name":
                if not isinstance(value, str):
                    raise ConfigError(f"name must be a string, not {value!r}")
            elif isinstance(f.default, bool):
                if not isinstance(value, bool):
                    raise ConfigError(f"{f.name} must be true or false, not {value!r}")
            elif not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{f.name} must be an integer, not {value!r}")
        for key in ("batch", "block_in", "block_out", "uop_buffer_bytes", "inp_buffer_bytes",
                    "wgt_buffer_bytes", "acc_buffer_bytes", "token_queue_depth", "cmd_queue_depth"):
            value = getattr(self, key)
            if not _is_pow2(value) and not (key == "cmd_queue_depth" and value == 0):
                raise ConfigError(f"{key}={value} must be a power of two")
        for key, limit in _DEPTH_LIMITS.items():
            if getattr(self, key) > limit:
                raise ConfigError(f"{key}={getattr(self, key)} is more than {limit}, the most a queue is built with "
                                  f"(a deeper one costs memory and buys no overlap the compiler can use)")
        block_macs = self.batch * self.block_in * self.block_out
        if block_macs > MAX_PRODUCTS:
            raise ConfigError(f"batch·block_in·block_out = {block_macs} is more than {MAX_PRODUCTS} (a 1×64×64 "
                              f"array), the largest the RTL generator is meant for")
        if self.gemm_lanes and not (_is_pow2(self.gemm_lanes) and self.gemm_lanes <= self.block_out):
            raise ConfigError(f"gemm_lanes={self.gemm_lanes} must be 0 (all of block_out) or a power of two up to "
                              f"block_out = {self.block_out}")
        for key, allowed in _DATA_WIDTHS.items():
            if getattr(self, key) not in allowed:
                raise ConfigError(f"{key}={getattr(self, key)} is not supported; "
                                  f"choose one of {', '.join(map(str, allowed))}")
        if not 0 <= self.soft_products <= self.macs_per_cycle:
            raise ConfigError(f"soft_products={self.soft_products} must be between 0 and the GEMM's "
                              f"{self.macs_per_cycle} products")
        lanes = self.batch * self.block_out
        if self.vector_lanes and not (_is_pow2(self.vector_lanes) and self.vector_lanes <= lanes):
            raise ConfigError(f"vector_lanes={self.vector_lanes} must be 0 (one per accumulator lane) or a "
                              f"power of two up to batch·block_out = {lanes}")
        if self.serial_core and self.vector_width != 1:
            raise ConfigError(f"serial_core builds one ALU lane: it needs vector_lanes = 1, not {self.vector_lanes}"
                              + (" (one per accumulator lane)" if not self.vector_lanes else ""))
        if self.serial_core and self.gemm_lanes:
            raise ConfigError(f"serial_core computes one lane at a time already: it needs gemm_lanes = 0, "
                              f"not {self.gemm_lanes}")
        if self.serial_core and self.soft_products:
            raise ConfigError(f"serial_core builds block_in = {self.block_in} products, in DSP blocks: it needs "
                              f"soft_products = 0, not {self.soft_products}")
        if self.dram_bus_width not in _BUS_WIDTHS:
            raise ConfigError(f"dram_bus_width={self.dram_bus_width} is not an AXI data width; "
                              f"choose one of {', '.join(map(str, _BUS_WIDTHS))}")
        for mem in ("inp", "wgt", "acc", "uop"):  # uop size depends on the others
            size, elem = getattr(self, f"{mem}_buffer_bytes"), self.elem_bytes(mem)
            if size < elem:
                raise ConfigError(f"{mem}_buffer_bytes={size} is smaller than one {mem} block "
                                  f"({elem} bytes)")
        # Field widths follow the buffer depths: every instruction must still fit its word.
        problem = isa.config_problem(self)
        if problem:
            raise ConfigError(problem)

    # -- derived quantities -------------------------------------------------

    def lanes(self, mem):
        """``(count, width)`` of the integers one element of ``mem`` holds.

        ``mem`` is one of ``"inp"`` (batch × block_in), ``"wgt"`` (block_out ×
        block_in), ``"acc"``, ``"out"`` (batch × block_out) and ``"acc8"``
        (the int8 DRAM form of an accumulator block).
        """
        return {
            "inp": (self.batch * self.block_in, self.inp_width),
            "wgt": (self.block_out * self.block_in, self.wgt_width),
            "acc": (self.batch * self.block_out, self.acc_width),
            "out": (self.batch * self.block_out, self.out_width),
            "acc8": (self.batch * self.block_out, 8),
        }[mem]

    def elem_bytes(self, mem):
        """Bytes of one element (one SRAM entry) of memory ``mem``: ``"uop"`` or one of :meth:`lanes`'."""
        if mem == "uop":
            return self.uop_bits_stored // 8
        count, width = self.lanes(mem)
        return count * width // 8

    def depth(self, mem):
        """Entries in buffer ``mem`` (``"out"`` shares the accumulator's index space)."""
        if mem == "out":
            mem = "acc"
        return getattr(self, f"{mem}_buffer_bytes") // self.elem_bytes(mem)

    @property
    def uop_depth(self):
        return self.depth("uop")

    @property
    def inp_depth(self):
        return self.depth("inp")

    @property
    def wgt_depth(self):
        return self.depth("wgt")

    @property
    def acc_depth(self):
        return self.depth("acc")

    def index_bits(self, mem):
        """Bits of an index into buffer ``mem``."""
        return max(1, _log2(self.depth(mem)))

    @property
    def uop_bits(self):
        """Bits of one micro-op's fields (:class:`tilewright.isa.Uop`): acc index, inp-or-acc index, wgt index."""
        return isa.uop_bits(self)

    @property
    def src_index_bits(self):
        """Bits of a micro-op's source index: an inp index (GEMM) or an acc index (ALU)."""
        return max(self.index_bits("inp"), self.index_bits("acc"))

    @property
    def uop_bits_stored(self):
        """Bits a micro-op occupies in SRAM and DRAM: 32 or 64."""
        return 32 if self.uop_bits <= 32 else 64

    @property
    def cmd_queue_slots(self):
        """The command queue's capacity the functional simulator and the compiler's checker model:
        ``cmd_queue_depth``, or 1 without a queue (the stream's register, as the RTL holds it). (Behind a
        queue the RTL holds one instruction more, its sequencer's, so their deadlock verdicts err safe.)"""
        return max(1, self.cmd_queue_depth)

    @property
    def vector_width(self):
        """Accumulator lanes the ALU and the requantizing STORE process per cycle."""
        return self.vector_lanes or self.batch * self.block_out

    @property
    def vector_passes(self):
        """Cycles one ALU micro-op (or one requantized element) takes: ``batch·block_out / vector_width``."""
        return self.batch * self.block_out // self.vector_width

    @property
    def per_channel_store(self):
        """Whether the requantizing STORE has the per-lane scale register (``requant_store`` and
        ``store_scale``)."""
        return self.requant_store and self.store_scale

    @property
    def bus_bytes(self):
        return self.dram_bus_width // 8

    @property
    def gemm_width(self):
        """Output lanes (of ``block_out``) the GEMM computes per cycle."""
        return self.gemm_lanes or self.block_out

    @property
    def gemm_passes(self):
        """Cycles one GEMM micro-op takes (a resetting one takes one): ``block_out / gemm_width``."""
        return self.block_out // self.gemm_width

    @property
    def macs_per_cycle(self):
        """The GEMM's products, and so its peak multiply-accumulates a cycle: ``batch·block_in·gemm_width``."""
        return self.batch * self.block_in * self.gemm_width

    def params(self):
        """The parameters as a plain dict (no name), in declaration order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "name"}

    @property
    def fingerprint(self):
        """Short hash of the parameters; programs built for one config carry it."""
        params = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "name"
                  and not (f.metadata.get("option") and getattr(self, f.name) == f.default)}
        blob = json.dumps(params, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    @property
    def tag(self):
        """Readable summary, e.g. ``1x16x16_i8w8a32o8``."""
        return (f"{self.batch}x{self.block_in}x{self.block_out}_i{self.inp_width}"
                f"w{self.wgt_width}a{self.acc_width}o{self.out_width}")

    def replace(self, **changes):
        """A copy with some parameters changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def toml(self):
        """The config as a TOML file that :func:`load_config` reads back to it (the name too)."""
        lines = [f"name = {json.dumps(self.name)}"]
        lines += [f"{key} = {str(value).lower() if isinstance(value, bool) else value}"
                  for key, value in self.params().items()]
        return "\n".join(lines) + "\n"

    def describe(self):
        """Parameters plus derived depths and element sizes, JSON-ready."""
        info = {"name": self.name, "fingerprint": self.fingerprint, "tag": self.tag, **self.params()}
        info["depths"] = {mem: self.depth(mem) for mem in ("uop", "inp", "wgt", "acc", "out")}
        info["elem_bytes"] = {mem: self.elem_bytes(mem)
                              for mem in ("uop", "inp", "wgt", "acc", "out", "acc8")}
        info["uop_bits"] = self.uop_bits
        return info


_SMALL = HwConfig(
    name="small", batch=1, block_in=8, block_out=8,
    uop_buffer_bytes=8 * 1024, inp_buffer_bytes=8 * 1024, wgt_buffer_bytes=32 * 1024,
    acc_buffer_bytes=32 * 1024, token_queue_depth=64, cmd_queue_depth=64, dram_bus_width=64)

_TINY = HwConfig(
    name="tiny", batch=1, block_in=4, block_out=4,
    uop_buffer_bytes=2048, inp_buffer_bytes=1024, wgt_buffer_bytes=2048, acc_buffer_bytes=4096,
    token_queue_depth=16, cmd_queue_depth=16, dram_bus_width=32)

PRESETS = {
    # One product a cycle in the least logic: one ALU lane, no performance counters, the lean DMA and range
    # checks, no requantizing STORE (the ALU requantizes), shallow queues and small buffers. It fits the
    # Tang Nano 9K's GW1NR-9 with room to place and route, and runs the compiled models.
    "pico": HwConfig(
        name="pico", batch=1, block_in=1, block_out=1,
        uop_buffer_bytes=512, inp_buffer_bytes=1024, wgt_buffer_bytes=2048, acc_buffer_bytes=1024,
        token_queue_depth=4, cmd_queue_depth=2, dram_bus_width=32,
        vector_lanes=1, perf_counters=False, lean=True, requant_store=False),
    "tiny": _TINY,
    # `tiny` on the whole diet, for the iCEBreaker's UP5K (5,280 logic cells, 30 block RAMs): the serial core
    # (GEMM and ALU a lane at a time), one instruction per stream, fetch sharing the loads' DMA engine, MUL a
    # bit a cycle, the ALU requantizing, 1 KiB of micro-ops, and logic for a slow clock (docs/fpga.md).
    "tiny_serial": _TINY.replace(
        name="tiny_serial", uop_buffer_bytes=1024, vector_lanes=1, perf_counters=False, lean=True,
        requant_store=False, serial_mul=True, cmd_queue_depth=0, serial_core=True, slow_clock=True),
    "small": _SMALL,
    # `small` as an FPGA board wants it: its on-chip memory serves one burst at a time (lean loaders lose
    # nothing), and the ALU takes the requantizing in two lanes instead of 8 requantizing STORE lanes and a
    # third accumulator port. 70 MULT18X18D; it places and routes on the 85F, which `small` did not.
    "slim": _SMALL.replace(name="slim", vector_lanes=2, lean=True, requant_store=False),
    # The 45F has 72 MULT18X18D (ALU 8 lanes x 3, requantize 8 x 2, range checks 3: 24 GEMM products fit)
    # and 108 DP16KD (each accumulator read port is 8 of them per 512 entries).
    # (no per-lane scale register: its wider multipliers would take 8 more)
    "compact": _SMALL.replace(name="compact", acc_buffer_bytes=16 * 1024, soft_products=40, store_scale=False),
    # The 85F's 1x16x16, built the way `slim` is. DP16KD are at most 36 bits wide: a 2048-bit weight entry
    # takes 57 of them at any depth up to 512. All 256 products a cycle did not route (their 4,096 wires
    # from the DSP rows to the adder trees, 110 of them built in logic): the GEMM computes 8 of the 16
    # output lanes a cycle, 128 products in 128 of the 156 MULT18X18D (the two-lane ALU takes 6).
    "medium": HwConfig(
        name="medium", batch=1, block_in=16, block_out=16,
        uop_buffer_bytes=8 * 1024, inp_buffer_bytes=8 * 1024, wgt_buffer_bytes=128 * 1024,
        acc_buffer_bytes=32 * 1024, token_queue_depth=64, cmd_queue_depth=64, dram_bus_width=64,
        vector_lanes=2, lean=True, requant_store=False, gemm_lanes=8),
    "default": HwConfig(name="default"),
}


def load_config(spec):
    """A config from a preset name, a TOML path, or an existing :class:`HwConfig`.

    A TOML file holds parameter keys at top level (or in a ``[hw]`` table);
    ``base = "small"`` starts from a preset and overrides only what is given.
    """
    if isinstance(spec, HwConfig):
        return spec
    spec = str(spec)
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if not path.suffix == ".toml" and not path.exists():
        raise ConfigError(f"unknown config {spec!r}: not a preset ({', '.join(PRESETS)}) "
                          f"nor a TOML file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {spec} does not exist") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {spec} is not UTF-8 text (TOML files are)") from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read config file {spec}: {e}") from None
    if "hw" in data:
        outside = sorted(set(data) - {"hw"})
        if outside or not isinstance(data["hw"], dict):
            raise ConfigError(f"{spec}: with a [hw] table every parameter goes in it"
                              + (f" ({', '.join(outside)} are outside it)" if outside else ""))
        data = data["hw"]
    data = dict(data)
    base = data.pop("base", "default")
    if not isinstance(base, str) or base not in PRESETS:
        raise ConfigError(f"{spec}: base={base!r} is not a preset ({', '.join(PRESETS)})")
    known = {f.name for f in dataclasses.fields(HwConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{spec}: unknown parameter(s) {', '.join(unknown)}")
    data.setdefault("name", path.stem)
    return PRESETS[base].replace(**data)
