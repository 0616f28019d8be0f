"""The gradio app: the only package of specviz that imports gradio. ``demo.build_demo`` composes one module per
tab; below the tabs: ``widgets`` (shared widgets, error conversion, handler binding), ``forms`` (form values ->
settings), ``store`` (the shared models), ``runs`` (what the explorer's events run) and ``gpu`` (ZeroGPU)."""
from .demo import build_demo, launch

__all__ = ["build_demo", "launch"]
