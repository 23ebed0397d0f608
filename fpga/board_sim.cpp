// The simulated board: the Verilated SoC (tilewright.fpga.soc.SocCore) with its UART pins on a
// pseudo-terminal. Prints the terminal's path on stdout, then runs until killed: a host opens the
// path with pyserial and talks to the SoC exactly as it would to a board's USB-UART.
//
// Bytes from the terminal are shifted onto uart_rx as 8N1 frames of UART_DIVISOR cycles per bit;
// frames on uart_tx are sampled mid-bit and written back. While the SoC reports idle and the
// line is quiet, the harness sleeps in poll() instead of clocking.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <termios.h>
#include <unistd.h>
#include <vector>

#include "Vtop.h"
#include "verilated.h"
#include "tw_board.h"   // UART_DIVISOR (generated)

static Vtop* top;

static void tick() {
    top->clk = 0;
    top->eval();
    top->clk = 1;
    top->eval();
}

int main(int argc, char** argv) {
    Verilated::commandArgs(argc, argv);
    prctl(PR_SET_PDEATHSIG, SIGTERM);      // never outlive the process that started us
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) || unlockpt(master)) {
        perror("pseudo-terminal");
        return 1;
    }
    const char* path = ptsname(master);
    // Keep the other side open too, in raw mode: a host that disconnects then leaves no hangup behind.
    int slave = open(path, O_RDWR | O_NOCTTY);
    struct termios tio;
    if (slave < 0 || tcgetattr(slave, &tio)) {
        perror("pseudo-terminal");
        return 1;
    }
    cfmakeraw(&tio);
    tcsetattr(slave, TCSANOW, &tio);
    fcntl(master, F_SETFL, O_NONBLOCK);
    printf("%s\n", path);
    fflush(stdout);

    top = new Vtop;
    top->uart_rx = 1;
    top->rst = 1;
    tick();
    tick();
    top->rst = 0;

    const int bit = UART_DIVISOR, frame = 10 * UART_DIVISOR;
    std::deque<unsigned char> to_soc;     // bytes waiting for uart_rx
    std::vector<unsigned char> to_host;   // bytes from uart_tx not yet written
    int rx_bit = -1, rx_timer = 0;        // the frame being shifted in: bit index (-1: none)
    unsigned rx_frame = 0;
    int tx_timer = -1, tx_bits = 0;       // the frame being sampled (-1: line idle)
    unsigned tx_value = 0;
    long quiet = 0;                        // cycles the SoC has been idle with nothing on the line
    unsigned char buf[4096];

    for (unsigned long cycle = 0;; cycle++) {
        // -- host to SoC ----------------------------------------------------------------------
        if (rx_bit < 0 && to_soc.empty() && cycle % frame == 0) {
            ssize_t n = read(master, buf, sizeof buf);
            for (ssize_t k = 0; k < n; k++) to_soc.push_back(buf[k]);
        }
        if (rx_bit < 0 && !to_soc.empty()) {
            rx_frame = (1u << 9) | ((unsigned)to_soc.front() << 1);     // stop, data, start (LSB first)
            to_soc.pop_front();
            rx_bit = 0;
            rx_timer = bit;
        }
        if (rx_bit >= 0) {
            top->uart_rx = (rx_frame >> rx_bit) & 1;
            if (--rx_timer == 0) {
                rx_timer = bit;
                if (++rx_bit == 10) rx_bit = -1;
            }
        } else {
            top->uart_rx = 1;
        }
        tick();
        // -- SoC to host ----------------------------------------------------------------------
        if (tx_timer < 0) {
            if (!top->uart_tx) {
                tx_timer = bit / 2;        // to the middle of the start bit
                tx_bits = 0;
                tx_value = 0;
            }
        } else if (--tx_timer == 0) {
            tx_timer = bit;
            if (tx_bits >= 1 && tx_bits <= 8) tx_value |= (unsigned)top->uart_tx << (tx_bits - 1);
            if (++tx_bits == 10) {         // past the stop bit's middle
                if (top->uart_tx) to_host.push_back((unsigned char)tx_value);
                tx_timer = -1;
            }
        }
        if (!to_host.empty() && (tx_timer < 0 || to_host.size() >= sizeof buf)) {
            ssize_t n = write(master, to_host.data(), to_host.size());
            if (n > 0) to_host.erase(to_host.begin(), to_host.begin() + n);
        }
        // -- sleep while nothing happens --------------------------------------------------------
        bool line_quiet = rx_bit < 0 && to_soc.empty() && tx_timer < 0 && to_host.empty();
        quiet = (line_quiet && top->idle) ? quiet + 1 : 0;
        if (quiet > 2 * frame) {
            struct pollfd p = {master, POLLIN, 0};
            poll(&p, 1, 50);
            quiet = 2 * frame - frame + 1;   // look again within one frame time (cycle % frame)
        }
    }
}
