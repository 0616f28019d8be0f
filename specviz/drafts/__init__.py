"""Drafts: everything that proposes tokens for the target to verify, one module per kind.

``drafter`` holds the interface (``Proposal``, ``Drafter``), the shared draft loop, model drafts and prompt
lookup; ``ngram`` and ``hybrid`` the count-based drafts; ``early_exit``, ``eagle`` and ``self_drafts`` the drafts
made of the target itself; ``cross``, ``alignment`` and ``pairing`` the drafts with another tokenizer; ``distill``
how a draft is trained towards its target. Imports: the math and records above (``sampling``, ``config``,
``records``), ``specviz.trees`` and ``specviz.runtime``; never the decoder, the labs, the views or the app.
"""
