"""The requantization unit's number formats, declared once: a float32 scale held as its 24-bit
significand (the implicit one included) and a 7-bit exponent, the range of scales the unit
takes, and how a requantizing STORE's parameter rows hold them (`ops.requant` is its
arithmetic; `hw/rtl/requant.py` its lane; sim/semantics.py `store` its instruction)."""

SIGNIFICAND_BITS = 24  # float32's, the implicit leading one included
EXPONENT_BITS = 7
MIN_EXPONENT = -64  # the least scale is 2**MIN_EXPONENT
MAX_EXPONENT = 15  # scales are below 2**(MAX_EXPONENT + 1)
assert -(1 << (EXPONENT_BITS - 1)) <= MIN_EXPONENT and MAX_EXPONENT < 1 << (EXPONENT_BITS - 1)

# A requantizing STORE's parameter rows (accumulator rows param_base + 0, 1, 2), one lane per
# output channel: the int32 bias; the scale's fields, significand in bits 0-23 and exponent
# (two's complement) in 24-30; the zero point (bits 0-9), clip low (10-17), clip high (18-25),
# each two's complement (the output is int8, so the bounds are; the zero point reaches +-511).
PARAM_ROWS = ("bias", "scale", "clip")
ZERO_BITS, BOUND_BITS = 10, 8


def param_rows(channels: int, block_out: int) -> int:
    """Accumulator rows a layer's parameter sets take: PARAM_ROWS per output block."""
    return len(PARAM_ROWS) * -(-channels // block_out)


def pack_scale(significand, exponent):
    """The scale row's lanes from the fields (numpy arrays or ints)."""
    return significand | ((exponent & ((1 << EXPONENT_BITS) - 1)) << SIGNIFICAND_BITS)


def unpack_scale(word):
    """(significand, exponent) from the scale row's lanes."""
    significand = word & ((1 << SIGNIFICAND_BITS) - 1)
    return significand, _signed(word >> SIGNIFICAND_BITS, EXPONENT_BITS)


def pack_clip(zero, lo, hi):
    """The clip row's lanes from the zero point and the clip bounds."""
    mask_z, mask_b = (1 << ZERO_BITS) - 1, (1 << BOUND_BITS) - 1
    return (zero & mask_z) | ((lo & mask_b) << ZERO_BITS) | ((hi & mask_b) << (ZERO_BITS + 8))


def unpack_clip(word):
    """(zero point, clip low, clip high) from the clip row's lanes."""
    return (
        _signed(word, ZERO_BITS),
        _signed(word >> ZERO_BITS, BOUND_BITS),
        _signed(word >> (ZERO_BITS + BOUND_BITS), BOUND_BITS),
    )


def _signed(x, bits: int):
    x = x & ((1 << bits) - 1)
    return x - ((x >> (bits - 1)) << bits)
