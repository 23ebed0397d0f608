"""Every register-to-register path of a synthesised ECP5 netlist against a clock period, in seconds.

nextpnr reports one critical path per clock after minutes of place and
route; the paths to fix for a faster clock are usually hundreds. This walks
Yosys's ``synth_ecp5`` netlist (``top.json`` of a build, ``--synth-only``
included) with a delay per cell and per net and lists every endpoint whose
estimated arrival exceeds the period, grouped by the register the path
starts from and the register (or block RAM port) it ends at.

The model is rough on purpose: a LUT4 is :data:`LUT_NS` plus one net of
``hop_ns`` (routing dominates on these parts: the 85F's worst paths at
100 MHz spent 1.3-1.6 ns per net) and :data:`FANOUT_NS` per doubling of
the net's sinks (one register choosing among the 256 bits of a write
register took 11.7 ns to reach them all), carry chains ripple at
:data:`CARRY_NS` per CCU2C, a block RAM's output comes :data:`BRAM_CLK_TO_Q_NS`
after the clock, a combinational MULT18X18D takes :data:`MULT_NS`. It ranks
paths and counts them; nextpnr's figures after placement are the truth.

Those figures, for every endpoint, come from a routed build's
``pnr_report.json`` (nextpnr's ``--detailed-timing-report``, which the builds
ask for): :func:`routed_endpoints` reads each endpoint's latest arrival and
:func:`group_endpoints` counts the late ones by register or by unit. The
report does not say where an endpoint's path starts; :func:`routed_paths`
gives each routed endpoint the netlist's estimated latest path into it, so
nextpnr's late endpoints can be grouped by start and end register too.
"""

import collections
import math
import re

__all__ = ["estimate_paths", "group_paths", "routed_endpoints", "routed_paths", "group_endpoints",
           "LUT_NS", "CARRY_NS", "BRAM_CLK_TO_Q_NS", "MULT_NS"]

FF_CLK_TO_Q_NS = 0.5
LUT_NS = 0.25
MUX_NS = 0.2             # PFUMX / L6MUX21: inside a slice, no net
CARRY_NS = 0.1           # CIN -> COUT of one CCU2C (two bits)
SUM_NS = 0.5             # into a CCU2C, out of its sum
LUTRAM_NS = 0.5          # TRELLIS_DPR16X4's asynchronous read
BRAM_CLK_TO_Q_NS = 5.6   # DP16KD without its output register
MULT_NS = 3.5
SETUP_NS = {"DI": 0.1, "CE": 0.3, "LSR": 0.3}
FANOUT_NS = 1.0          # a net's delay, per doubling of its sinks


def _bits(cell, port):
    return [b for b in cell["connections"].get(port, []) if isinstance(b, int)]


def _names(module):
    """A readable name per net bit: a public name where there is one, the shortest otherwise."""
    names = {}
    for name, net in module["netnames"].items():
        public = not name.startswith("$")
        for k, bit in enumerate(net["bits"]):
            if not isinstance(bit, int):
                continue
            label = name if len(net["bits"]) == 1 else f"{name}[{k}]"
            old = names.get(bit)
            if old is None or (public and (old.startswith("$") or len(label) < len(old))):
                names[bit] = label
    return names


def _ff_label(cell_name, cell, names):
    """A flip-flop's name in the estimate: its output's net name (else its cell name)."""
    q = _bits(cell, "Q")
    return names.get(q[0], cell_name) if q else cell_name


def _graph(module, hop_ns):
    """(names, drivers: bit -> (inputs, delay), starts: bit -> time, endpoints: [(bit, name, port, setup)]).
    A cell's delay includes the net its output drives, except where that net is dedicated wiring (a
    carry chain's, a slice's wide multiplexers)."""
    names = _names(module)
    drivers, starts, endpoints = {}, {}, []
    sinks = collections.Counter(b for cell in module["cells"].values()
                                for p, d in cell["port_directions"].items() if d == "input" for b in _bits(cell, p))

    def spread(bit):        # what a net's sinks add to its delay
        return FANOUT_NS * math.log2(max(sinks[bit], 1))

    def drive(outputs, inputs, delay, *, net=True):
        """``outputs`` settle ``delay`` after the latest of ``inputs``, and, where they drive a routed
        ``net``, after it reaches its sinks."""
        for bit in outputs:
            drivers[bit] = (inputs, delay + (hop_ns + spread(bit) if net else 0.0))

    for cell_name, cell in module["cells"].items():
        kind, ports = cell["type"], cell["port_directions"]
        if kind == "TRELLIS_FF":
            label = _ff_label(cell_name, cell, names)
            starts.update((b, FF_CLK_TO_Q_NS + spread(b)) for b in _bits(cell, "Q"))
            endpoints += [(b, label, p, s) for p, s in SETUP_NS.items() for b in _bits(cell, p)]
        elif kind == "LUT4":
            drive(_bits(cell, "Z"), sum((_bits(cell, p) for p in "ABCD"), []), LUT_NS)
        elif kind == "PFUMX":
            drive(_bits(cell, "Z"), _bits(cell, "ALUT") + _bits(cell, "BLUT") + _bits(cell, "C0"), MUX_NS, net=False)
        elif kind == "L6MUX21":
            drive(_bits(cell, "Z"), _bits(cell, "D0") + _bits(cell, "D1") + _bits(cell, "SD"), MUX_NS, net=False)
        elif kind == "CCU2C":
            inputs = _bits(cell, "CIN") + sum((_bits(cell, f"{p}{k}") for p in "ABCD" for k in (0, 1)), [])
            drive(_bits(cell, "COUT"), inputs, CARRY_NS, net=False)
            drive(_bits(cell, "S0") + _bits(cell, "S1"), inputs, SUM_NS)
        elif kind == "TRELLIS_DPR16X4":
            drive(_bits(cell, "DO"), _bits(cell, "RAD"), LUTRAM_NS)
            endpoints += [(b, cell_name, p, SETUP_NS["CE"]) for p in ("WAD", "DI", "WRE") for b in _bits(cell, p)]
        elif kind == "DP16KD":
            for port, direction in ports.items():
                if direction == "output":
                    starts.update((b, BRAM_CLK_TO_Q_NS + spread(b)) for b in _bits(cell, port))
                elif not port.startswith("CLK"):
                    endpoints += [(b, cell_name, port, SETUP_NS["CE"]) for b in _bits(cell, port)]
        elif kind == "MULT18X18D":
            inputs = sum((_bits(cell, p) for p in ports if p[0] in "AB" and p[1:].isdigit()), [])
            drive(sum((_bits(cell, p) for p in ports if p.startswith("P")), []), inputs, MULT_NS)
    return names, drivers, starts, endpoints


def estimate_paths(netlist, *, hop_ns=1.3):
    """Estimated arrival (ns, setup included) at every endpoint of ``netlist`` (Yosys JSON, top module
    ``top``), latest first: a list of dicts with the endpoint's ``name`` and ``port``, its ``ns``, and
    the ``path`` of net names from the register it starts at."""
    module = netlist["modules"]["top"]
    names, drivers, starts, endpoints = _graph(module, hop_ns)
    arrival, came_from = {}, {}

    def settle(bit):            # (iterative: a netlist's paths are deeper than Python's recursion limit)
        stack, entered = [bit], set()
        while stack:
            b = stack[-1]
            if b in arrival:
                stack.pop()
                continue
            if b in entered and any(i not in arrival for i in drivers.get(b, ((), 0))[0]):
                arrival[b], came_from[b] = 0.0, None        # a combinational loop: cut here
                stack.pop()
                continue
            entered.add(b)
            if b in starts or b not in drivers:
                arrival[b], came_from[b] = starts.get(b, 0.0) + (hop_ns if b in starts else 0.0), None
                stack.pop()
                continue
            inputs, delay = drivers[b]
            waiting = [i for i in inputs if i not in arrival]
            if waiting:
                stack.extend(waiting)
                continue
            source = max(inputs, key=arrival.__getitem__, default=None)
            arrival[b] = (arrival[source] if source is not None else 0.0) + delay
            came_from[b] = source
            stack.pop()
        return arrival[bit]

    out = []
    for bit, name, port, setup in endpoints:
        ns = settle(bit) + setup
        path, b = [], bit
        while b is not None:
            path.append(names.get(b, f"${b}"))
            b = came_from.get(b)
        out.append({"name": name, "port": port, "ns": round(ns, 2), "path": path[::-1]})
    return sorted(out, key=lambda e: -e["ns"])


def _register(name):
    """A register's name without its bit index and Yosys's suffixes."""
    return re.sub(r"\[\d+\]$", "", re.sub(r"\$\d+", "", name))


def group_paths(paths, period_ns):
    """The endpoints later than ``period_ns``, grouped by (start register, end register and port):
    a list of (worst ns, endpoints, start, end), worst first."""
    groups = collections.defaultdict(list)
    for p in paths:
        if p["ns"] > period_ns:
            groups[(_cell_register(p["path"][0]), f"{_cell_register(p['name'])}.{p['port']}")].append(p["ns"])
    return sorted(((max(v), len(v), start, end) for (start, end), v in groups.items()), reverse=True)


def routed_endpoints(report):
    """Every timed endpoint of a routed build from nextpnr's JSON ``report`` (written with
    ``--detailed-timing-report``), latest first: dicts with the endpoint cell's ``name``, its ``port``
    and the latest arrival ``ns`` at it (setup and clock skew not included: a few more than nextpnr's
    slack counts as failing), as nextpnr's timing analysis has them; asynchronous endpoints are left out.
    Raises ValueError on a report without the detailed timings."""
    nets = report.get("detailed_net_timings")
    if nets is None:
        raise ValueError("the report has no detailed timings (nextpnr's --detailed-timing-report)")
    out = [{"name": e["cell"], "port": e["port"], "ns": round(e["delay"][1], 2)}
           for net in nets for e in net["endpoints"] if e.get("event") != "<async>"]
    return sorted(out, key=lambda e: -e["ns"])


def routed_paths(report, netlist, *, hop_ns=1.3):
    """:func:`routed_endpoints` of ``report``, each with the ``path`` (net names) that
    :func:`estimate_paths` finds latest into the same endpoint of ``netlist``, the build's synthesised
    netlist: where nextpnr's late endpoints most likely start. An endpoint the estimate does not time
    has a path of its own name alone. A flip-flop's ``M`` input (nextpnr's name for its data input when
    it bypasses the slice's LUT) is reported as ``DI``, as the netlist has it."""
    module = netlist["modules"]["top"]
    names = _names(module)
    estimated = {}
    for e in estimate_paths(netlist, hop_ns=hop_ns):        # (latest first: keep each endpoint's latest)
        estimated.setdefault((e["name"], e["port"]), e["path"])
    out = []
    for e in routed_endpoints(report):
        cell = module["cells"].get(e["name"])
        label = _ff_label(e["name"], cell, names) if cell is not None and cell["type"] == "TRELLIS_FF" else e["name"]
        port = "DI" if e["port"] == "M" else e["port"]
        out.append({**e, "port": port, "path": estimated.get((label, port), [label])})
    return out


def _cell_register(cell):
    """The register (or block RAM) a packed cell belongs to: its name without what Yosys's techmap and
    autoname appended (``_TRELLIS_FF_Q_3``, a RAM's ``_DOA8`` net it was named after), as :func:`_register`."""
    return _register(re.sub(r"(_TRELLIS_\w*|_DO[AB]\d+\w*)$", "", _register(cell)))


def group_endpoints(endpoints, period_ns, *, depth=None):
    """The endpoints later than ``period_ns`` grouped by register and port, or with ``depth`` by the
    unit ``depth`` levels down the hierarchy: a list of (latest ns, endpoints, group), latest first."""
    groups = collections.defaultdict(list)
    for e in endpoints:
        if e["ns"] > period_ns:
            register = _cell_register(e["name"])
            key = ".".join(register.split(".")[:depth]) if depth else f"{register}.{e['port']}"
            groups[key].append(e["ns"])
    return sorted(((max(v), len(v), k) for k, v in groups.items()), reverse=True)
