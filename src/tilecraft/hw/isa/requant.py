"""The requantization unit's number formats, declared once: a float32 scale held as its 24-bit
significand (the implicit one included) and a 7-bit exponent, and the range of scales the unit
takes (`ops.requant` is its arithmetic; `hw/rtl/requant.py` its lane)."""

SIGNIFICAND_BITS = 24  # float32's, the implicit leading one included
EXPONENT_BITS = 7
MIN_EXPONENT = -64  # the least scale is 2**MIN_EXPONENT
MAX_EXPONENT = 15  # scales are below 2**(MAX_EXPONENT + 1)
assert -(1 << (EXPONENT_BITS - 1)) <= MIN_EXPONENT and MAX_EXPONENT < 1 << (EXPONENT_BITS - 1)
