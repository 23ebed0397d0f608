// Fast Verilator harness for the tilewright accelerator: no Python per cycle.
//
// The accelerator's AXI4 manager port is served by a DRAM model in C++ (any
// number of outstanding bursts, or one at a time; responses in order, a fixed
// read latency, one beat per cycle unless a bandwidth is set), and its
// AXI4-Lite registers by a small manager. The host
// talks to this process over stdin/stdout, one command per line:
//
//   mem SIZE                   allocate SIZE bytes of DRAM
//   latency CYCLES             read latency (from address accepted to first data beat)
//   beat TICKS                 bandwidth: each data beat, read or written, keeps the memory busy for
//                              TICKS/1024 cycles, and no beat starts while it is busy; at a beat a cycle
//                              or slower (TICKS >= 1024) one beat at a time, reads first (0, the default:
//                              a beat every cycle each way)
//   one_burst 0|1              1: one burst at a time, as a board's on-chip memory (fpga/memory.py without
//                              its input register) serves them: an address is accepted only when no burst
//                              is in progress, reads and writes taking turns when both wait; a read's
//                              first beat comes LATENCY cycles after its address, and the next burst may
//                              start the cycle after a read's last beat or a write's response
//   write ADDR PATH            copy a file into DRAM
//   read ADDR LEN PATH         copy DRAM bytes to a file
//   run ADDR COUNT MAXCYCLES [TRACE]
//                              run COUNT instructions at ADDR until done (or MAXCYCLES);
//                              answers "ok STATUS ERROR_INDEX CYCLES TIMED_OUT C0 C1 ..." (the counters in
//                              COUNTER_OFFSETS order); with
//                              TRACE, writes "cycle stream event index" lines for every
//                              instruction start and retirement
//   quit
//
// Accesses beyond the DRAM size answer SLVERR, as the cocotb bench does.
// Every constant (bus width, register offsets, AXI response codes, traced streams) comes from
// tw_spec.h, which sim/fast.py generates from the Python spec into the build directory.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "Vtop.h"
#include "tw_spec.h"
#include "verilated.h"

#define AXI(name) top->m_axi___05F##name
#define LITE(name) top->s_axil___05F##name
#define TRACE(name) top->trace___05F##name

// -- wide-signal helpers ----------------------------------------------------------

template <typename T>
static void set_bytes(T& sig, const uint8_t* p) {
    uint64_t v = 0;
    std::memcpy(&v, p, BUS_BYTES < 8 ? BUS_BYTES : 8);
    sig = static_cast<T>(v);
}
template <std::size_t N>
static void set_bytes(VlWide<N>& sig, const uint8_t* p) {
    for (std::size_t i = 0; i < N; i++) {
        uint32_t w;
        std::memcpy(&w, p + 4 * i, 4);
        sig[i] = w;
    }
}
template <typename T>
static void get_bytes(const T& sig, uint8_t* p) {
    uint64_t v = static_cast<uint64_t>(sig);
    std::memcpy(p, &v, BUS_BYTES < 8 ? BUS_BYTES : 8);
}
template <std::size_t N>
static void get_bytes(const VlWide<N>& sig, uint8_t* p) {
    for (std::size_t i = 0; i < N; i++) {
        uint32_t w = sig[i];
        std::memcpy(p + 4 * i, &w, 4);
    }
}

// -- the model ---------------------------------------------------------------------

struct Burst {
    uint64_t addr;
    unsigned beats;
    unsigned id;
    uint64_t ready_cycle;
};

struct Harness {
    Vtop* top;
    std::vector<uint8_t> dram;
    uint64_t cycle = 0;
    unsigned latency = 0;                // set by the host ("latency" command)
    uint64_t beat_ticks = 0;             // 1/1024 cycles of memory time per beat ("beat" command)
    uint64_t memory_free = 0;            // when the memory can move the next beat, in 1/1024 cycles
    bool one_burst = false;              // one burst at a time ("one_burst" command)
    bool prefer_write = false;           // (one_burst) a write goes first when both wait: a read went last
    uint64_t burst_free = 0;             // (one_burst) the first cycle the next burst may start (NEVER: not
                                         // known yet)
    static constexpr uint64_t NEVER = ~uint64_t(0);
    std::deque<Burst> reads, writes;     // accepted, not finished
    unsigned read_beat = 0, write_beat = 0;
    bool write_error = false;
    std::deque<std::pair<unsigned, unsigned>> responses;   // (id, resp) waiting for B
    FILE* trace = nullptr;

    explicit Harness(Vtop* t) : top(t) {}

    bool in_range(uint64_t addr, uint64_t n) const { return addr + n <= dram.size(); }

    bool memory_ready() const { return memory_free <= cycle * 1024; }
    // A beat that starts within a cycle of the memory coming free starts, in memory time, when it came free:
    // beats start on whole cycles, and a stream of them keeps the fractions (else it would move
    // bus_bytes / ceil(bus_bytes / bytes_per_cycle) a cycle, not bytes_per_cycle).
    void memory_moves_beat() {
        uint64_t now = cycle * 1024;
        memory_free = (memory_free + 1024 > now ? memory_free : now) + beat_ticks;
    }

    // Drive the DUT's inputs from the model state for this cycle.
    void drive() {
        if (one_burst) {
            bool idle = cycle >= burst_free;
            AXI(arready) = idle && AXI(arvalid) && !(prefer_write && AXI(awvalid));
            AXI(awready) = idle && AXI(awvalid) && !AXI(arready);
        } else {
            AXI(arready) = 1;
            AXI(awready) = 1;
        }
        bool r = !reads.empty() && reads.front().ready_cycle <= cycle && memory_ready();
        AXI(rvalid) = r;
        if (r) {
            const Burst& b = reads.front();
            uint64_t a = b.addr + uint64_t(read_beat) * BUS_BYTES;
            static uint8_t zero[BUS_BYTES];
            bool ok = in_range(a, BUS_BYTES);
            set_bytes(AXI(rdata), ok ? &dram[a] : zero);
            AXI(rresp) = ok ? AXI_RESP_OKAY : AXI_RESP_SLVERR;
            AXI(rid) = b.id;
            AXI(rlast) = read_beat + 1 == b.beats;
        }
        // (a memory slower than a beat a cycle moves one beat at a time: a read beat offered goes first)
        AXI(wready) = !writes.empty() && memory_ready() && !(beat_ticks >= 1024 && r)
                      && !(one_burst && writes.front().ready_cycle > cycle);
        AXI(bvalid) = !responses.empty();
        if (!responses.empty()) {
            AXI(bid) = responses.front().first;
            AXI(bresp) = responses.front().second;
        }
    }

    // Apply the handshakes that happen at this clock edge.
    void handshakes() {
        if (AXI(arvalid) && AXI(arready)) {
            // (one_burst: the memory reads a beat a cycle while R takes them, the first the cycle after the
            // address, and is free two cycles after reading its last, which it does as R takes the one
            // before: a one-beat read behind the last beat of another waits for R to take that)
            burst_free = AXI(arlen) == 0 && reads.empty() ? cycle + 3 : NEVER;
            reads.push_back({AXI(araddr), unsigned(AXI(arlen)) + 1, unsigned(AXI(arid)), cycle + latency});
            prefer_write = true;
        }
        if (AXI(rvalid) && AXI(rready)) {
            memory_moves_beat();
            if (++read_beat + 1 == reads.front().beats) burst_free = cycle + 2;
            if (read_beat == reads.front().beats) {
                reads.pop_front();
                read_beat = 0;
                if (!reads.empty() && reads.front().beats == 1)
                    burst_free = std::max(cycle, reads.front().ready_cycle - latency + 1) + 2;
            }
        }
        if (AXI(awvalid) && AXI(awready)) {
            // (one_burst: the data is taken from the next cycle on)
            writes.push_back({AXI(awaddr), unsigned(AXI(awlen)) + 1, unsigned(AXI(awid)), cycle + 1});
            prefer_write = false;
            burst_free = NEVER;             // (one_burst: until its response is taken)
        }
        if (AXI(wvalid) && AXI(wready)) {
            memory_moves_beat();
            const Burst& b = writes.front();
            uint64_t a = b.addr + uint64_t(write_beat) * BUS_BYTES;
            uint8_t data[BUS_BYTES];
            get_bytes(AXI(wdata), data);
            uint64_t strobe = static_cast<uint64_t>(AXI(wstrb));
            if (in_range(a, BUS_BYTES)) {
                for (int k = 0; k < BUS_BYTES; k++)
                    if (strobe >> k & 1) dram[a + k] = data[k];
            } else {
                write_error = true;
            }
            if (++write_beat == b.beats) {
                responses.push_back({b.id, unsigned(write_error ? AXI_RESP_SLVERR : AXI_RESP_OKAY)});
                writes.pop_front();
                write_beat = 0;
                write_error = false;
            }
        }
        if (AXI(bvalid) && AXI(bready)) {
            responses.pop_front();
            burst_free = cycle + 1;
        }
    }

    void record_trace() {
        if (!trace) return;
        unsigned long long now = cycle;
#define TW_TRACE_STREAM(s)                                                                   \
        if (TRACE(s##_start)) std::fprintf(trace, "%llu " #s " start %u\n", now, uint32_t(TRACE(s##_index))); \
        if (TRACE(s##_retire)) std::fprintf(trace, "%llu " #s " end %u\n", now, uint32_t(TRACE(s##_index)));
        TW_STREAMS(TW_TRACE_STREAM)
#undef TW_TRACE_STREAM
    }

    void tick() {
        drive();
        top->clk = 0;
        top->eval();
        record_trace();
        handshakes();
        top->clk = 1;
        top->eval();
        cycle++;
    }

    // -- AXI4-Lite manager (between runs, one access at a time) --------------------

    void lite_write(uint32_t addr, uint32_t data) {
        LITE(awaddr) = addr;
        LITE(wdata) = data;
        LITE(wstrb) = AXIL_WSTRB_ALL;
        LITE(awvalid) = 1;
        LITE(wvalid) = 1;
        LITE(bready) = 1;
        bool aw = false, w = false;
        while (!(aw && w)) {
            drive();
            top->clk = 0;
            top->eval();
            bool aw_fire = LITE(awvalid) && LITE(awready), w_fire = LITE(wvalid) && LITE(wready);
            handshakes();
            top->clk = 1;
            top->eval();
            cycle++;
            aw |= aw_fire;
            w |= w_fire;
            if (aw) LITE(awvalid) = 0;
            if (w) LITE(wvalid) = 0;
        }
        while (true) {
            drive();
            top->clk = 0;
            top->eval();
            bool b = LITE(bvalid);
            handshakes();
            top->clk = 1;
            top->eval();
            cycle++;
            if (b) break;
        }
        LITE(bready) = 0;
    }

    uint32_t lite_read(uint32_t addr) {
        LITE(araddr) = addr;
        LITE(arvalid) = 1;
        LITE(rready) = 1;
        uint32_t value = 0;
        bool requested = false;
        while (true) {
            drive();
            top->clk = 0;
            top->eval();
            bool ar = LITE(arvalid) && LITE(arready);
            bool r = LITE(rvalid);
            if (r) value = LITE(rdata);
            handshakes();
            top->clk = 1;
            top->eval();
            cycle++;
            if (ar) {
                requested = true;
                LITE(arvalid) = 0;
            }
            if (r && requested) break;
        }
        LITE(rready) = 0;
        return value;
    }
};

int main(int argc, char** argv) {
    auto* context = new VerilatedContext;
    context->commandArgs(argc, argv);
    auto* top = new Vtop{context};
    Harness h(top);
    top->rst = 1;
    for (int i = 0; i < 4; i++) h.tick();
    top->rst = 0;
    h.tick();

    std::string line;
    while (std::getline(std::cin, line)) {
        std::istringstream in(line);
        std::string cmd;
        in >> cmd;
        if (cmd == "mem") {
            uint64_t size;
            in >> size;
            h.dram.assign(size, 0);
            std::cout << "ok" << std::endl;
        } else if (cmd == "latency") {
            in >> h.latency;
            std::cout << "ok" << std::endl;
        } else if (cmd == "beat") {
            in >> h.beat_ticks;
            std::cout << "ok" << std::endl;
        } else if (cmd == "one_burst") {
            in >> h.one_burst;
            std::cout << "ok" << std::endl;
        } else if (cmd == "write") {
            uint64_t addr;
            std::string path;
            in >> addr >> path;
            std::ifstream f(path, std::ios::binary);
            std::vector<char> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
            if (!h.in_range(addr, data.size())) {
                std::cout << "error write beyond DRAM" << std::endl;
                continue;
            }
            std::memcpy(&h.dram[addr], data.data(), data.size());
            std::cout << "ok" << std::endl;
        } else if (cmd == "read") {
            uint64_t addr, len;
            std::string path;
            in >> addr >> len >> path;
            if (!h.in_range(addr, len)) {
                std::cout << "error read beyond DRAM" << std::endl;
                continue;
            }
            {
                std::ofstream f(path, std::ios::binary);
                f.write(reinterpret_cast<const char*>(&h.dram[addr]), len);
            }   // closed (flushed) before the host reads it
            std::cout << "ok" << std::endl;
        } else if (cmd == "run") {
            uint64_t addr, count, max_cycles;
            std::string trace_path;
            in >> addr >> count >> max_cycles >> trace_path;
            h.trace = trace_path.empty() ? nullptr : std::fopen(trace_path.c_str(), "w");
            h.lite_write(REG_INSN_ADDR, uint32_t(addr));
            h.lite_write(REG_INSN_COUNT, uint32_t(count));
            h.lite_write(REG_CONTROL, CONTROL_START);
            uint64_t start = h.cycle;
            bool timed_out = false;
            h.tick();                         // done drops in the cycle after the start write
            while (!top->irq) {
                h.tick();
                if (h.cycle - start > max_cycles) {
                    timed_out = true;
                    break;
                }
            }
            if (h.trace) std::fclose(h.trace);
            h.trace = nullptr;
            uint32_t status = h.lite_read(REG_STATUS), index = h.lite_read(REG_ERROR_INDEX);
            std::cout << "ok " << status << " " << index << " " << (h.cycle - start) << " " << timed_out;
            for (uint32_t offset : COUNTER_OFFSETS) std::cout << " " << h.lite_read(offset);
            std::cout << std::endl;
        } else if (cmd == "quit") {
            break;
        } else if (!cmd.empty()) {
            std::cout << "error unknown command " << cmd << std::endl;
        }
    }
    top->final();
    delete top;
    delete context;
    return 0;
}
