"""What a program does, read off its instructions: each instruction's scratchpad and DRAM
footprint (`footprint`), which instruction a compute token vouches for (`completion`), the
dependence tokens placed from them (`tokens`), the order DRAM hand-overs need (`dram_order`),
each stored output's dataflow (`dataflow`) and the verifier that checks them all (`verify`).
Programs of any origin go through it: the operator pipeline's, the hand-written ones, chained
networks'. It imports only `mapping`, to know what an operator's dataflow should be."""
