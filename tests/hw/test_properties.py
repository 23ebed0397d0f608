"""The four formal properties, proved by k-induction on each preset, and each caught on a broken variant."""

import linecache
import re
from pathlib import Path

import pytest
from amaranth import Const

import tilewright.hw.dma as dma
from tilewright.config import load_config
from tilewright.hw.arbiter import ReadArbiter
from tilewright.hw.sequencer import Sequencer
from tilewright.sim.formal import FormalError, prove
from tilewright.sim.properties import ArbiterFairness, TokensPushedFirst, formal_properties, prove_property

LEAN = load_config(Path(__file__).parents[2] / "examples" / "boards" / "tiny_lean.toml")
SERIAL = load_config(Path(__file__).parents[2] / "examples" / "boards" / "tiny_serial.toml")
PROPERTIES = ["dma_bounds", "axi_stable", "arbiter_fair", "tokens_pushed_first"]


def _property(cfg, name):
    return next(p for p in formal_properties(cfg) if p.name == name)


@pytest.mark.parametrize("name", PROPERTIES)
@pytest.mark.parametrize("cfg", [load_config("tiny"), load_config("default"), LEAN], ids=["tiny", "default", "tiny-lean"])
def test_property_is_proved(cfg, name, tmp_path):
    prove_property(_property(cfg, name), workdir=tmp_path)


def test_axi_stable_is_proved_for_a_slow_clock(tmp_path):
    """Without the skid buffers and the writer's element register (``slow_clock``), AR, AW and W still hold
    until ready (W as long as the elements offered do)."""
    prove_property(_property(SERIAL, "axi_stable"), workdir=tmp_path)


def test_dma_bounds_holds_for_the_small_fpgas_lean_rows(tmp_path, monkeypatch):
    """The lean splitter's compact row arithmetic (iCE40, Gowin) is proved as well as the registered one."""
    monkeypatch.setattr(dma, "compact_row_arithmetic", lambda platform: True)
    prove_property(_property(LEAN, "dma_bounds"), workdir=tmp_path)


def _fails(prop_or_design, tmp_path, expected, depth=8):
    """A counterexample from reset within ``depth`` cycles (a real bug, not a weak invariant) violates an
    assertion whose source contains ``expected`` (or one of its ``|``-separated alternatives)."""
    with pytest.raises(FormalError, match="FAIL") as failure:
        if hasattr(prop_or_design, "harnesses"):
            prove_property(prop_or_design, workdir=tmp_path, depth=depth, mode="bmc")
        else:
            prove(prop_or_design, workdir=tmp_path, name="broken", depth=depth, mode="bmc")
    failed = re.findall(r"failed assertion \S+ at (\S+\.py):(\d+)", str(failure.value))
    sources = [linecache.getline(path, int(line)) + linecache.getline(path, int(line) + 1) for path, line in failed]
    assert any(text in source for text in expected.split("|") for source in sources), (expected, sources)


def test_dma_bounds_catches_bursts_across_4k(tmp_path, monkeypatch):
    """A splitter that reckons boundaries every 8 KiB."""
    monkeypatch.setattr(dma, "BOUNDARY_BYTES", 8192)
    monkeypatch.setattr(dma, "BOUNDARY_SHIFT", 13)
    _fails(_property(load_config("tiny"), "dma_bounds"), tmp_path, "no burst crosses 4 KiB")


def test_dma_bounds_catches_bursts_past_the_row(tmp_path, monkeypatch):
    """A lean splitter whose bursts always run to the end of their aligned block."""
    original = dma._LeanBurstSplitter.elaborate

    def overrunning(self, platform):
        m = original(self, platform)
        m.d.comb += self.request.payload.beats.eq(dma.LEAN_BURST_BEATS)
        return m
    monkeypatch.setattr(dma._LeanBurstSplitter, "elaborate", overrunning)
    _fails(_property(LEAN, "dma_bounds"), tmp_path, "a burst ends inside its row|no burst crosses 4 KiB")


def test_axi_stable_catches_a_withdrawn_request(tmp_path, monkeypatch):
    """A reader that takes back its AR request when read data arrives."""
    original = dma._address_channel

    def withdrawing(m, axi, prefix, split, pending, bus_bytes, *, room=1, **options):
        return original(m, axi, prefix, split, pending, bus_bytes, room=room & ~axi.rvalid if prefix == "ar" else room,
                        **options)
    monkeypatch.setattr(dma, "_address_channel", withdrawing)
    _fails(_property(load_config("tiny"), "axi_stable"), tmp_path, "valid holds until ready")


class RestlessArbiter(ReadArbiter):
    """Re-arbitrates every cycle, even while the granted request waits."""

    @staticmethod
    def _holds(bus):
        return Const(0)


class FixedPriorityArbiter(ReadArbiter):
    """The lowest-numbered requester always wins: the others can starve."""

    def _after(self, grant, k):
        return Const(k - 1, range(self.count))


@pytest.mark.parametrize("arbiter, expected", [(RestlessArbiter, "payload holds until ready"),
                                               (FixedPriorityArbiter, "is granted before")])
def test_arbiter_fair_catches_a_broken_arbiter(arbiter, expected, tmp_path):
    _fails(ArbiterFairness(arbiter=arbiter), tmp_path, expected)


class GreedySequencer(Sequencer):
    """Starts an instruction without checking that its tokens are there."""

    def _tokens_ready(self, h):
        return Const(1)


def test_tokens_pushed_first_catches_a_greedy_sequencer(tmp_path):
    _fails(TokensPushedFirst(cfg=load_config("tiny"), sequencer=GreedySequencer), tmp_path, "no token popped")
