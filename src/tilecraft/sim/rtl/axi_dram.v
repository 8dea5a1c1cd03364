// A DRAM behind an AXI4 slave port, for simulation only.
//
// One data bus shared by reads and writes: bursts are served in the order their address was
// accepted, the first beat no sooner than `latency` cycles after acceptance, GAP idle cycles
// between bursts, one beat per cycle (minus random stalls when STALL_PCT > 0). Contents come
// from and go to hex files (one beat per line), named by plusargs and a job number, so one
// simulator process can run many programs: `load` reads "<DRAM_IN>.<job>.hex" (after zeroing),
// `dump` writes "<DRAM_OUT>.<job>.hex", its first `dump_beats` beats (0: all of them, some
// 4 M lines of hex for the 32 MB model: seconds to write and read back, where a program's
// own bytes take milliseconds). Byte address a maps to beat (a - BASE) / bytes.
`timescale 1ns/1ps
module axi_dram #(
    parameter DATA_BITS = 64,
    parameter WORDS = 131072,
    parameter GAP = 1,
    parameter QUEUE = 32
) (
    input  wire                   clk,
    input  wire                   rst,
    input  wire [63:0]            base,
    input  wire [15:0]            latency,
    input  wire [7:0]             stall_pct,
    input  wire [31:0]            seed,
    input  wire                   load,
    input  wire                   dump,
    input  wire [15:0]            job,
    input  wire [31:0]            dump_beats,
    input  wire [63:0]            araddr,
    input  wire [7:0]             arlen,
    input  wire                   arvalid,
    output wire                   arready,
    output reg  [DATA_BITS-1:0]   rdata,
    output wire [1:0]             rresp,
    output reg                    rlast,
    output reg                    rvalid,
    input  wire                   rready,
    input  wire [63:0]            awaddr,
    input  wire [7:0]             awlen,
    input  wire                   awvalid,
    output wire                   awready,
    input  wire [DATA_BITS-1:0]   wdata,
    input  wire [DATA_BITS/8-1:0] wstrb,
    input  wire                   wlast,
    input  wire                   wvalid,
    output reg                    wready,
    output wire [1:0]             bresp,
    output wire                   bvalid,
    input  wire                   bready
);
    localparam BYTES = DATA_BITS / 8;
    localparam SHIFT = $clog2(BYTES);
    reg [DATA_BITS-1:0] mem [0:WORDS-1];
    reg [63:0] q_addr [0:QUEUE-1];
    reg [8:0]  q_beats [0:QUEUE-1];
    reg        q_write [0:QUEUE-1];
    reg [63:0] q_time [0:QUEUE-1];
    reg [5:0] head, tail;
    wire [5:0] used = tail - head;
    reg [63:0] now;
    reg busy;
    reg [8:0] beat;
    reg [7:0] bcount;  // write responses owed
    assign bvalid = bcount != 0;
    reg [63:0] last_end;  // cycle of the previous burst's last beat
    reg [31:0] lfsr;
    reg [1023:0] name_in, name_out;
    reg [1023:0] fname;
    integer i;
    wire stall = (stall_pct != 0) && ((lfsr[15:0] % 100) < stall_pct);
    wire room = used < QUEUE;
    assign arready = room;
    assign awready = room && !arvalid;  // one address per cycle, reads first
    assign rresp = 2'b00;
    assign bresp = 2'b00;
    wire [63:0] head_beat = (q_addr[head[4:0]] - base) >> SHIFT;

    initial begin
        if (!$value$plusargs("DRAM_IN=%s", name_in)) name_in = "dram_in";
        if (!$value$plusargs("DRAM_OUT=%s", name_out)) name_out = "dram_out";
    end

    always @(posedge clk) begin
        if (rst) begin
            head <= 0; tail <= 0; now <= 0; busy <= 0; beat <= 0; last_end <= 0;
            rvalid <= 0; rlast <= 0; wready <= 0; bcount <= 0;
            lfsr <= seed | 32'h1;
        end else begin
            now <= now + 1;
            lfsr <= {lfsr[30:0], lfsr[31] ^ lfsr[21] ^ lfsr[1] ^ lfsr[0]};
            if (load) begin
                for (i = 0; i < WORDS; i = i + 1) mem[i] = 0;
                $sformat(fname, "%0s.%0d.hex", name_in, job);
                $readmemh(fname, mem);
            end
            if (dump) begin
                $sformat(fname, "%0s.%0d.hex", name_out, job);
                if (dump_beats != 0 && dump_beats < WORDS) $writememh(fname, mem, 0, dump_beats - 1);
                else $writememh(fname, mem);
            end
            if (arvalid && arready) begin
                q_addr[tail[4:0]] <= araddr; q_beats[tail[4:0]] <= arlen + 1;
                q_write[tail[4:0]] <= 0; q_time[tail[4:0]] <= now; tail <= tail + 1;
            end else if (awvalid && awready) begin
                q_addr[tail[4:0]] <= awaddr; q_beats[tail[4:0]] <= awlen + 1;
                q_write[tail[4:0]] <= 1; q_time[tail[4:0]] <= now; tail <= tail + 1;
            end
            bcount <= bcount + ((busy && q_write[head[4:0]] && wvalid && wready
                                 && beat + 1 == q_beats[head[4:0]]) ? 1 : 0)
                              - ((bvalid && bready) ? 1 : 0);
            // a burst's first beat shows at max(accepted + latency, previous burst end + 1 + GAP)
            if (!busy) begin
                if (used != 0 && now + 1 >= q_time[head[4:0]] + latency && now >= last_end + GAP)
                        begin
                    busy <= 1;
                    beat <= 0;
                    if (q_write[head[4:0]]) begin
                        wready <= 1;
                    end else begin
                        rvalid <= 1;
                        rdata <= mem[head_beat];
                        rlast <= (q_beats[head[4:0]] == 1);
                    end
                end
            end else if (!q_write[head[4:0]]) begin
                // read burst: a beat stays until taken; random stalls only between beats
                if (rvalid && rready) begin
                    if (rlast) begin
                        rvalid <= 0; rlast <= 0; busy <= 0; head <= head + 1; last_end <= now;
                    end else begin
                        beat <= beat + 1;
                        rvalid <= !stall;
                        rdata <= mem[head_beat + beat + 1];
                        rlast <= (beat + 2 == q_beats[head[4:0]]);
                    end
                end else if (!rvalid) begin
                    rvalid <= !stall;
                    rdata <= mem[head_beat + beat];
                    rlast <= (beat + 1 == q_beats[head[4:0]]);
                end
            end else begin
                // write burst: take `beats` beats, then answer on B
                if (wvalid && wready) begin
                    for (i = 0; i < BYTES; i = i + 1)
                        if (wstrb[i]) mem[head_beat + beat][i*8 +: 8] <= wdata[i*8 +: 8];
                    if (beat + 1 == q_beats[head[4:0]]) begin
                        wready <= 0; busy <= 0; head <= head + 1; last_end <= now;
                    end else begin
                        beat <= beat + 1;
                        wready <= !stall;
                    end
                end else begin
                    wready <= !stall;
                end
            end
        end
    end
endmodule
