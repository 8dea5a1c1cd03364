"""Post-training int8 quantization: calibration, observers, requantization, the error report."""
