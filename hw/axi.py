"""AXI4 and AXI4-Lite signatures with the standard signal names.

Members are flat and named as in the AXI specification (``araddr``,
``rvalid``, ...), so an interface called ``m_axi`` becomes Verilog ports
``m_axi__araddr`` etc., which cocotbext-axi binds with
``AxiBus.from_prefix(dut, "m_axi_")``. Flows are from the manager's side.
"""

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AxiReadSignature", "AxiWriteSignature", "AxiSignature", "AxiLiteSignature", "forward",
           "BURST_INCR", "RESP_OKAY", "RESP_SLVERR", "LITE_DATA_WIDTH", "MAX_BURST_BEATS", "BOUNDARY_BYTES"]

BURST_INCR = 1
RESP_OKAY = 0
RESP_SLVERR = 2     # subordinate error: what DRAM models answer beyond their memory
LITE_DATA_WIDTH = 32    # AXI4-Lite registers are one 32-bit word each
MAX_BURST_BEATS = 256       # AXI4 INCR bursts
BOUNDARY_BYTES = 4096       # a burst must not cross a 4 KiB boundary


def _read_members(addr_width, data_width, id_width):
    return {
        "arid": Out(id_width), "araddr": Out(addr_width), "arlen": Out(8), "arsize": Out(3),
        "arburst": Out(2), "arvalid": Out(1), "arready": In(1),
        "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
        "rvalid": In(1), "rready": Out(1),
    }


def _write_members(addr_width, data_width, id_width):
    return {
        "awid": Out(id_width), "awaddr": Out(addr_width), "awlen": Out(8), "awsize": Out(3),
        "awburst": Out(2), "awvalid": Out(1), "awready": In(1),
        "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
        "wvalid": Out(1), "wready": In(1),
        "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
    }


class AxiReadSignature(wiring.Signature):
    """AXI4 read channels (AR, R) of a manager."""

    def __init__(self, *, addr_width, data_width, id_width=1):
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        super().__init__(_read_members(addr_width, data_width, id_width))


class AxiWriteSignature(wiring.Signature):
    """AXI4 write channels (AW, W, B) of a manager."""

    def __init__(self, *, addr_width, data_width, id_width=1):
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        super().__init__(_write_members(addr_width, data_width, id_width))


class AxiSignature(wiring.Signature):
    """A full AXI4 manager: read and write channels."""

    def __init__(self, *, addr_width, data_width, id_width=1):
        self.addr_width, self.data_width, self.id_width = addr_width, data_width, id_width
        super().__init__({**_read_members(addr_width, data_width, id_width),
                          **_write_members(addr_width, data_width, id_width)})


class AxiLiteSignature(wiring.Signature):
    """AXI4-Lite manager, :data:`LITE_DATA_WIDTH`-bit data."""

    def __init__(self, *, addr_width):
        self.addr_width = addr_width
        super().__init__({
            "awaddr": Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(LITE_DATA_WIDTH), "wstrb": Out(LITE_DATA_WIDTH // 8), "wvalid": Out(1), "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rdata": In(LITE_DATA_WIDTH), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })


def forward(m, inner, outer, *, skip=()):
    """Join a manager interface ``inner`` to a port ``outer`` with (at least) its members.

    Outgoing members of ``inner`` drive ``outer``'s, incoming members of
    ``outer`` drive ``inner``'s. Unlike :func:`wiring.connect` this works when
    ``outer`` has more members (a read-only manager onto a full AXI port) or
    other ID widths.
    """
    for name, member in inner.signature.members.items():
        if name in skip:
            continue
        if member.flow == Out:
            m.d.comb += getattr(outer, name).eq(getattr(inner, name))
        else:
            m.d.comb += getattr(inner, name).eq(getattr(outer, name))
