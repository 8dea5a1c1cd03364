"""The kernel records (`spec.Spec`), one module per family."""
