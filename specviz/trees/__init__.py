"""Token trees: several continuations drafted at once and verified in one target pass.

``tree`` the drafted tree and its walk (the accept step), ``chain`` the chain with sibling leaves, ``value``
how likely a node is accepted (learnt from verdicts), ``round`` a tree round's verify, keep and record.
Imports: the math and records above and ``specviz.runtime``; never drafts, the decoder, labs, views or app.
"""
