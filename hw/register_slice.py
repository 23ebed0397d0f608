"""Register slices: every signal of a valid/ready channel from a flip-flop, at full throughput.

On a large FPGA the accelerator and the memory it reads are far apart, and a
handshake decided combinationally on both sides (the memory's ``rvalid``
through the loader's ``rready`` back into the memory's FIFO) is one long
path. A register slice cuts it: ``valid`` and the payload leave from
registers, ``ready`` leaves from a register, one beat per cycle still goes
through, and a beat takes one cycle longer.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import AxiSignature

__all__ = ["SkidBuffer", "AxiRegisterSlice", "slice_channel"]


class SkidBuffer(wiring.Component):
    """A two-entry buffer between a valid/ready source and sink with no combinational path through it.

    ``i_ready`` is high while the spare ("skid") register is empty: a beat
    offered while the output is stalled lands there, so the source learns of
    the stall a cycle late without losing a beat.

    Members
    -------
    i_valid, i_payload : In ; i_ready : Out(1)
        From the source.
    o_valid, o_payload : Out ; o_ready : In(1)
        To the sink.
    """

    def __init__(self, width):
        self.width = width
        super().__init__({"i_valid": In(1), "i_payload": In(width), "i_ready": Out(1),
                          "o_valid": Out(1), "o_payload": Out(width), "o_ready": In(1)})

    def elaborate(self, platform):
        m = Module()
        skid_valid = Signal()
        # `i_ready` (`~skid_valid`) from a register of its own: `skid_valid` chooses every bit of the output
        # register's input, and `i_ready` reaches the source's registers (on the 85F at 100 MHz a burst
        # splitter's, 11.4-11.9 ns through both fan-outs).
        skid_empty = Signal(init=1, name="skid_empty_replica")
        skid_payload = Signal(self.width, reset_less=True)
        out_payload = Signal(self.width, reset_less=True)
        m.d.comb += [self.i_ready.eq(skid_empty), self.o_payload.eq(out_payload)]
        accept = self.i_valid & ~skid_valid
        with m.If(~self.o_valid | self.o_ready):        # the output register takes the next beat
            m.d.sync += [self.o_valid.eq(skid_valid | self.i_valid), skid_valid.eq(0), skid_empty.eq(1),
                         out_payload.eq(Mux(skid_valid, skid_payload, self.i_payload))]
        with m.Elif(accept):                            # stalled: the offered beat waits in the skid register
            m.d.sync += [skid_valid.eq(1), skid_empty.eq(0)]
        # The skid register takes every payload offered while it is empty, wanted or not: its enable is
        # a flip-flop's, not the sink's `ready` (on the 85F at 100 MHz the loader's ready reached it).
        with m.If(~skid_valid):
            m.d.sync += skid_payload.eq(self.i_payload)
        return m


def slice_channel(m, name, source, sink, *, valid="valid", ready="ready", payload):
    """Join one valid/ready channel from interface ``source`` to ``sink`` through a :class:`SkidBuffer`
    added to ``m`` as ``name``: ``valid`` and the ``payload`` members (names) flow from ``source`` to
    ``sink``, ``ready`` back."""
    source_fields = Cat(*(getattr(source, member) for member in payload))
    sink_fields = Cat(*(getattr(sink, member) for member in payload))
    m.submodules[name] = buf = SkidBuffer(len(source_fields))
    m.d.comb += [buf.i_valid.eq(getattr(source, valid)), getattr(source, ready).eq(buf.i_ready),
                 buf.i_payload.eq(source_fields), sink_fields.eq(buf.o_payload),
                 getattr(sink, valid).eq(buf.o_valid), buf.o_ready.eq(getattr(sink, ready))]


#: The AXI channels, by the prefix of their members' names (``ar``: ``arvalid``, ``araddr``, ...).
_CHANNELS = ("ar", "aw", "w", "r", "b")


def _channel_members(signature, channel):
    """(payload member names, whether it flows manager to subordinate) of ``channel`` in ``signature``
    (a manager's), taken from the signature itself, so a member added to it is carried through the slice.
    (No channel's prefix begins another's: ``r`` members never start with ``ar``.)"""
    payload = [n for n in signature.members
               if n.startswith(channel) and n not in (f"{channel}valid", f"{channel}ready")]
    return payload, signature.members[f"{channel}valid"].flow == Out


class AxiRegisterSlice(wiring.Component):
    """An AXI4 manager port ``m`` joined to a subordinate port ``s`` through a :class:`SkidBuffer` per
    channel: the same transactions, each channel a cycle later, and no path through the slice.

    Members
    -------
    s : In(AxiSignature)
        Where the manager connects.
    m : Out(AxiSignature)
        What connects to the subordinate.
    """

    def __init__(self, *, addr_width, data_width, id_width=1):
        self.axi_signature = AxiSignature(addr_width=addr_width, data_width=data_width, id_width=id_width)
        super().__init__({"s": In(self.axi_signature), "m": Out(self.axi_signature)})

    def elaborate(self, platform):
        m = Module()
        for channel in _CHANNELS:
            payload, forward = _channel_members(self.axi_signature, channel)
            source, sink = (self.s, self.m) if forward else (self.m, self.s)
            slice_channel(m, channel, source, sink, valid=f"{channel}valid", ready=f"{channel}ready",
                          payload=payload)
        return m
