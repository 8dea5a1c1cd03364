"""The accelerator. The contract every layer shares, pure data: `config` (HwConfig), `isa` (the
instruction set declared from it) and `regs` (the register map). `rtl` holds the Amaranth
design built from them."""
