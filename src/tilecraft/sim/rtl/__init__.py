"""The RTL testbench and device: the generated Verilog under cocotb + Verilator."""
