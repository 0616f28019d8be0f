"""specviz's decoder without torch, for a process as small as the engine it is compared with.

The same algorithm as ``specviz.decoder`` (draft -> verify -> accept -> commit, the same Round and Trace records, the
same DecodeConfig), its math in numpy (``slim.sampling``, pinned to ``specviz.sampling`` by tests), on a forward
that returns numpy logits: llama.cpp's (``runtime.llamacpp_seq.Sequence``, the GGUF as shipped) or any object with
``decode(tokens) -> (n, V) logits``, ``crop(keep)`` and ``length``. What it runs: autoregressive decoding and chains of
prompt lookup, a draft model on its own numpy forward (a draft GGUF on llama.cpp's), a feature draft on the C stack
or a hybrid of the lookup and one of them, greedy or sampled
(temperature, top-k, top-p; ``draft_greedy``, ``draft_stop``), Leviathan's accept rule. Any other draft, a token tree
or another accept rule needs the torch decoder, and is refused here before any work.

A seeded run draws its uniforms from numpy's generator, not torch's: the same law, other draws than the torch
decoder's run with that seed.
"""
from .decoder import SlimDecoding, autoregressive, fill_texts, speculative  # noqa: F401
from .drafts import Hybrid, Lookup, ModelDraft  # noqa: F401
from .feature_draft import FeatureDraft  # noqa: F401
