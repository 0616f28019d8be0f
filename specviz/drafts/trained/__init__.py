"""Drafts trained elsewhere, opened in the layouts their trainers write: the speculators format (vLLM's trainer:
``eagle3`` with its 3.1 switches; ``peagle``, ``dflash`` and ``dspark`` read and checked), EAGLE-3 checkpoints with
a ``midlayer.*`` layer (SGLang's SpecForge, the EAGLE authors' own), legacy EAGLE-1/HASS checkpoints and Medusa heads
(FasterDecoding's ``medusa_lm_head.safetensors``).

``formats`` reads a folder's config.json and safetensors headers (no weights) and names its layout; ``expect`` says
which tensors, shapes and switches that layout needs; ``check`` compares a draft with its target before any work
(``check_trained_draft``); ``tap`` reads the target's hidden states at chosen layers; ``eagle3``, ``eagle1`` and
``medusa`` run; ``coverage`` measures what a pruned draft vocabulary cannot say; ``load`` opens a folder.
Imports: ``specviz.drafts`` (the drafter interface), ``specviz.runtime``; nothing above.
"""
