"""A draft with another tokenizer (transformers' universal assisted decoding; Timor et al. 2025).

The draft reads the committed text (the target's last ``window`` tokens, decoded), continues it greedily in its
own tokens, and its new text is re-encoded with the target's tokenizer: the target tokens past the longest
prefix that re-encoding the committed text alone reproduces are the proposal. A proposal is a deterministic
function of the committed tokens, so verification treats each token as a point mass (q = onehot): accepted with
probability p(x) when sampling, iff it is the target's argmax when greedy. The output keeps the target's law at
any temperature, whatever the two tokenizers do at the boundary (that only changes how often drafts are accepted).
Each round records, beside the proposal, the draft's own tokens and their text (``Round.draft_view``).
"""
from __future__ import annotations

import copy
from dataclasses import replace

import torch

from ..records import DraftTokens
from ..runtime.lm import CachedLM, context_window
from ..sampling import logits_to_probs
from .alignment import incremental_texts
from .drafter import Drafter, Proposal, draft_loop, model_name


def shared_strings(draft_tokenizer, target_tokenizer) -> list[str]:
    """The token strings both vocabularies hold, sorted."""
    return sorted(set(draft_tokenizer.get_vocab()) & set(target_tokenizer.get_vocab()))


def reread(draft_tokenizer, target_tokenizer, committed: list[int], window: int) -> tuple[str, list[int]]:
    """(text, its draft ids): the target's last ``window`` committed tokens decoded and encoded in the draft's
    tokenizer (BOS, or id 0, when the text is empty)."""
    text = target_tokenizer.decode(committed[-window:], skip_special_tokens=True)
    return text, draft_tokenizer(text, add_special_tokens=False).input_ids or [draft_tokenizer.bos_token_id or 0]


class CrossTokenizerDrafter(Drafter):
    """Drafts with a causal LM whose tokenizer differs from the target's (``draft_tokenizer`` vs
    ``target_tokenizer``); ``window``: target tokens of context the draft re-reads each round."""

    def __init__(self, model, draft_tokenizer, target_tokenizer, window: int = 48, name: str | None = None):
        self.model, self.draft_tok, self.target_tok, self.window_tokens = model, draft_tokenizer, target_tokenizer, window
        self.name = name or f"{model_name(model)} (own tokenizer)"
        self.window = None  # reads a window of the context: any length is fine

    def start(self, prompt, cfg, vocab_size, device):
        super().start(prompt, cfg, vocab_size, device)
        self.lm = CachedLM(self.model)
        self.limit = context_window(self.model)

    def propose(self, committed, k, generator):
        text, ids = reread(self.draft_tok, self.target_tok, committed, self.window_tokens)
        if self.limit:
            ids = ids[-(self.limit - k):]
        new = []
        for _ in range(k):  # the draft's own greedy continuation, k of its tokens (its cache synced each step)
            new.append(int(self.lm.extend(ids + new, [])[-1].argmax()))
        base, full = self.draft_tok.decode(ids), self.draft_tok.decode(ids + new)
        added = full[len(base):] if full.startswith(base) else ""
        tokens = [t for t in retokenize(self.target_tok, text, added)[:k] if t < self.vocab_size]
        view = DraftTokens(tuple(new), incremental_texts(self.draft_tok.decode, ids, new))
        return Proposal(torch.tensor(tokens, dtype=torch.long, device=self.device), None, view)


def retokenize(tokenizer, text: str, added: str) -> list[int]:
    """The target tokens that ``added`` contributes after ``text``: encode both, drop their common prefix."""
    if not added:
        return []
    before = tokenizer(text, add_special_tokens=False).input_ids
    after = tokenizer(text + added, add_special_tokens=False).input_ids
    same = 0
    while same < min(len(before), len(after)) and before[same] == after[same]:
        same += 1
    if same == len(before):
        return after[same:]
    # re-encoding merged the added text into the last committed token(s), which are committed as they are: the
    # added text on its own is what continues them
    return tokenizer(added, add_special_tokens=False).input_ids


class IntersectionDrafter(Drafter):
    """Token-level intersection (Timor et al. 2025): a draft with another tokenizer drafts, one token at a time, from
    its q restricted to the tokens whose strings both vocabularies hold, renormalised and moved to the target's ids.
    That q is a real distribution on the target's vocabulary, and each drafted token is drawn from it, so the
    standard verification is exact at any temperature (the draft simply never proposes a token outside the
    intersection). The draft re-reads the committed text in its own tokens each round."""

    def __init__(self, model, draft_tokenizer, target_tokenizer, window: int = 48, min_overlap: float = 0.05,
                 name: str | None = None):
        shared = shared_strings(draft_tokenizer, target_tokenizer)
        target_vocab = len(target_tokenizer.get_vocab())
        if len(shared) < min_overlap * target_vocab:
            raise ValueError(f"the two vocabularies share {len(shared)} of the target's {target_vocab} tokens "
                             f"({len(shared) / target_vocab:.1%}): too few to draft from (at least {min_overlap:.0%})")
        self.model, self.draft_tok, self.target_tok, self.window_tokens = model, draft_tokenizer, target_tokenizer, window
        dv, tv = draft_tokenizer.get_vocab(), target_tokenizer.get_vocab()
        self.d_ids = torch.tensor([dv[s] for s in shared])
        self.t_ids = torch.tensor([tv[s] for s in shared])
        self.to_draft = dict(zip(self.t_ids.tolist(), self.d_ids.tolist()))
        self.overlap = len(shared) / target_vocab
        self.name = name or f"{model_name(model)} (shared tokens)"
        self.window = None

    def start(self, prompt, cfg, vocab_size, device):
        super().start(prompt, cfg, vocab_size, device)
        self.lm = CachedLM(self.model)

    def propose(self, committed, k, generator):
        _, ids = reread(self.draft_tok, self.target_tok, committed, self.window_tokens)

        def next_logits(drafted: list[int]) -> torch.Tensor:  # log q on the target's ids (-inf outside the overlap)
            q = logits_to_probs(self.lm.extend(ids + [self.to_draft[t] for t in drafted], [])[-1],
                                self.cfg.temperature, self.cfg.top_k, self.cfg.top_p)
            restricted = torch.full((self.vocab_size,), float("-inf"), dtype=q.dtype, device=q.device)
            restricted[self.t_ids.to(q.device)] = q[self.d_ids.to(q.device)].log()
            if not torch.isfinite(restricted).any():  # no shared token has mass here: draft uniformly among them
                restricted[self.t_ids.to(q.device)] = 0.0
            return restricted

        proposal = draft_loop(next_logits, k, replace(self.cfg, temperature=1.0 if not self.cfg.greedy else 0.0,
                                                      top_k=0, top_p=1.0), self.vocab_size, generator, self.device)
        new = [self.to_draft[t] for t in proposal.tokens.tolist()]  # the same strings, in the draft's ids
        return replace(proposal, draft_view=DraftTokens(tuple(new), incremental_texts(self.draft_tok.decode, ids, new)))


class CrossDrafter(Drafter):
    """A draft with another tokenizer, exact at any temperature, each run with the better rule for it: greedy runs
    re-tokenize its text (``CrossTokenizerDrafter``: the target's own tokenization of what the draft wrote); sampled
    runs draft from its q on the shared tokens (``IntersectionDrafter``: a real q, so a sampled proposal is accepted
    with min(1, p/q) rather than p), or re-tokenize where the vocabularies share too little.
    ``target_tokenizer`` None: bind it later with ``for_target`` (the app does, once it knows the target)."""

    def __init__(self, model, draft_tokenizer, target_tokenizer=None, window: int = 48, name: str | None = None):
        self.model, self.draft_tok, self.window_tokens = model, draft_tokenizer, window
        self.name = name or f"{model_name(model)} (own tokenizer)"
        self.window = None
        self.target_tok = None
        if target_tokenizer is not None:
            self._bind(target_tokenizer)

    def _bind(self, target_tokenizer) -> None:
        self.target_tok = target_tokenizer
        self.greedy_rule = CrossTokenizerDrafter(self.model, self.draft_tok, target_tokenizer, self.window_tokens,
                                                 self.name)
        try:
            self.sampled_rule = IntersectionDrafter(self.model, self.draft_tok, target_tokenizer, self.window_tokens,
                                                    name=self.name)
        except ValueError:  # too little shared vocabulary: sampled runs re-tokenize too (still exact)
            self.sampled_rule = None
        shared = shared_strings(self.draft_tok, target_tokenizer)
        self.overlap = len(shared) / max(1, len(target_tokenizer.get_vocab()))

    def for_target(self, target_tokenizer) -> CrossDrafter:
        """This draft bound to a target's tokenizer (the same object back if it already is)."""
        if self.target_tok is target_tokenizer:
            return self
        bound = copy.copy(self)
        bound._bind(target_tokenizer)
        return bound

    def start(self, prompt, cfg, vocab_size, device):
        if self.target_tok is None:
            raise ValueError(f"{self.name} has its own tokenizer: bind the target's first (for_target)")
        super().start(prompt, cfg, vocab_size, device)
        rule = self.greedy_rule if cfg.greedy or self.sampled_rule is None else self.sampled_rule
        self.rule = rule.fresh()
        self.rule.start(prompt, cfg, vocab_size, device)

    def prefill(self, prompt):
        self.rule.prefill(prompt)

    def propose(self, committed, k, generator):
        return self.rule.propose(committed, k, generator)


def drafting_through(draft, draft_tokenizer, target_tokenizer, name: str, target: str) -> CrossDrafter:
    """A causal LM with another tokenizer as a drafter through the target's tokenizer, named "NAME (own tokenizer)";
    a ValueError for anything that is not a causal LM (it writes no text to re-tokenize)."""
    if not (hasattr(draft, "config") and callable(draft)):
        raise ValueError(f"{name!r} cannot draft for {target!r}: its tokenizer differs from the target's and it is "
                         "not a causal LM, so its text cannot be re-tokenized for the target")
    return CrossDrafter(draft, draft_tokenizer, target_tokenizer, name=f"{name} (own tokenizer)")
