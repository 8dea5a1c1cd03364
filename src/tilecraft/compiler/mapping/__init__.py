"""How an operator lands on the accelerator's array, before anything is scheduled: channel
blocks, layouts, folded kernel taps (`blocks`), and the ALU passes a clip takes (`clip`). The
room every other room of the operator compiler stands on; it imports none of them."""
