"""The accelerator: HwConfig, the ISA and (in later modules) its Amaranth components."""
