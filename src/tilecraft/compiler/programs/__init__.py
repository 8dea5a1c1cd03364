"""Programs written by hand on the operator pipeline's builder rather than searched: pooling
(`pool`), the scaled add of two int8 tensors (`eltwise`), the example blocked GEMM and its
tiling (`blocked_gemm`, `gemm_schedule`), and random programs for differential tests of the
simulator and the RTL (`random_test_programs`)."""
