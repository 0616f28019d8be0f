"""How a model runs: a model with its KV cache behind one interface (``lm.CachedLM``), transformers'
forwards (``forwards``), the lean Llama forward (``lean_llama``) and its packed matmuls (``packed_linear``),
8-bit storage (``int8``), the batch's padded cache (``batch_lm``), a tree's attention mask (``tree_mask``),
devices, and where hub models come from (``hub``, ``hub_pairs``). The bottom of the house: imports nothing else
of specviz.
"""
