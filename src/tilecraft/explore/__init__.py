"""Design-space exploration, the co-design half: `HwConfig`s swept, each with the network's
modeled latency on the cycle model and its real synthesis resources (yosys, cached by config
digest), the Pareto front of latency against LUT, DSP and BRAM, and which boards each point
fits. The sweep's points run as tasks on Dask (`sweep.py`)."""
