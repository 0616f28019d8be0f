"""The lean Llama forward's layer stack and matmuls in C (``stack.c``): ``library`` builds and loads it (or says why
not), ``ops`` holds its single operators (a packed matmul, RMSNorm), ``stack`` a pass of every layer in one call."""
from .library import MAX_HEAD_DIM, Dims, Layer, disabled, enabled, fits, lib, unavailable
from .ops import linear, packed, rms_norm
from .stack import Stack, layers, layers_rows, supports_stack

__all__ = ["MAX_HEAD_DIM", "Dims", "Layer", "disabled", "enabled", "fits", "layers", "layers_rows", "lib", "linear", "packed",
           "rms_norm", "Stack", "supports_stack", "unavailable"]
