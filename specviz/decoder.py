"""Speculative and autoregressive generation as generators of rounds.

Each round: draft (the drafter proposes up to k tokens x_i ~ q_i) -> verify (the target scores
the context plus every proposal in ONE forward pass, giving p_1..p_{k+1}) -> accept (sampling.verify)
-> commit (append the emitted tokens; caches roll back to the committed prefix on the next sync).
The autoregressive baseline is the same loop with nothing drafted: one target token per forward.
``accept``, ``commit`` and ``record_round`` serve batch.py's rows too. specviz/reference.py is the same
algorithm on one screen (no cache, no recording), pinned to this one by tests.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from .commit import commit  # noqa: F401 (batch.py takes the steps from here)
from .config import DecodeConfig, eos_ids
from .drafts.drafter import Drafter, Proposal, as_drafter, model_name
from .drafts.pairing import check_fits
from .kpolicy import make_policy
from .rules import closed_forms, rule_of, verify_rule
from .runtime.lm import CachedLM, Stopwatch, context_window
from .sampling import Verdict, beta, logits_to_probs, point_mass, residual_top, verify, verify_block, verify_greedy
from .trace import Round, Trace, drawn, pad
from .trees.chain import grow_chain
from .trees.round import check_tree_model, keep_path, record_tree_round, verify_tree
from .trees.tree import grow, walk
from .trees.value import AcceptanceEstimate, SiblingEstimate


class Decoding:
    """One generation run. Iterate it to get rounds as they happen; ``trace`` fills in as it goes.
    The trace names the models target_name and draft_name (default: the model's id, the drafter's name);
    ``forward`` picks the target's forward path (``runtime.lm.PATHS``; default: ``lm.default_path()``)."""

    def __init__(self, target, draft, input_ids: torch.Tensor, cfg: DecodeConfig | None = None,
                 target_name: str | None = None, draft_name: str | None = None, forward: str | None = None):
        cfg = cfg or DecodeConfig()
        if not isinstance(cfg, DecodeConfig):
            raise ValueError(f"cfg must be a specviz.DecodeConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        prompt = prompt_list(input_ids)
        shared = None if draft is None else as_drafter(draft)
        self.drafter: Drafter | None = None if shared is None else shared.fresh()  # this run's own copy
        if self.drafter is not None:
            check_fits(target, self.drafter)
        check_window(prompt, cfg, target, self.drafter)
        if cfg.tree is not None and self.drafter is not None:
            check_tree_model(target, "target")
        self.target = CachedLM(target, forward, trees=cfg.tree is not None)
        self.generator = torch.Generator(device=self.target.device).manual_seed(cfg.seed)
        self.committed = list(prompt)
        names = run_names(target, self.drafter, target_name, draft_name)
        self.trace = Trace.start(prompt, cfg, *names, eos_ids(target))
        self.trace.forward = self.target.forward_name
        self._clock = Stopwatch(self.target.device)
        self.tree_value = AcceptanceEstimate() if cfg.tree is not None and cfg.tree.dynamic else None
        self.sibling_value = _sibling_estimate(shared, cfg)

    def __iter__(self) -> Iterator[Round]:
        """Rounds as they happen. ``trace.total_s`` counts this run's own work only (prefill, rounds and their
        bookkeeping), never the time the consumer spends between rounds (a UI redrawing, say)."""
        cfg, trace, policy, work = self.cfg, self.trace, make_policy(self.cfg), Stopwatch(self.target.device)
        with work.running():
            self._prefill()
        while len(trace.new_tokens) < cfg.max_new_tokens and not trace.stop_reason:
            with work.running():
                left = cfg.max_new_tokens - len(trace.new_tokens)
                k = 0 if self.drafter is None else min(policy.k, left - 1)  # never draft past the budget
                if self.drafter is not None and cfg.tree is not None:
                    r = self._tree_round(len(trace.rounds), min(cfg.tree.levels, left - 1))
                else:
                    r = self._round(len(trace.rounds), k)
                trace.rounds.append(r)
                policy.update(r)
            trace.total_s = work.seconds
            yield r
        trace.stop_reason = trace.stop_reason or "length"
        trace.total_s = work.seconds

    def run(self) -> Trace:
        for _ in self:
            pass
        return self.trace

    def _prefill(self) -> None:
        with self._clock.running():
            if self.drafter is not None:
                self.drafter.attach(self.target)  # before the target's first pass: a self-draft may keep its state
            self.target.feed(self.committed)  # its last logits are p_1 of the first round
            if self.drafter is not None:
                self.drafter.start(self.committed, self.cfg, self.target.vocab_size, self.target.device)
                self.drafter.prefill(self.committed)
        self.trace.prefill_s = self._clock.take()

    def _round(self, index: int, k: int) -> Round:
        """draft -> verify -> accept -> commit, timed; returns the round's record."""
        t0 = time.perf_counter()
        with self._clock.running():
            proposal = self._draft(k)
        draft_head_s, draft_s = self._clock.take_head(), self._clock.take()
        with self._clock.running():
            p, logits = self._verify_pass(proposal.tokens)
        target_head_s, target_s = self._clock.take_head(), self._clock.take()
        q, x = verified_q(self.cfg, proposal, p.shape[-1], p.dtype), proposal.tokens
        verdict = accept(self.cfg, p, logits, q, x, self.generator)
        emitted = commit(self.committed, x[: verdict.n_accepted].tolist() + [verdict.next_token], self.trace)
        return record_round(self.cfg, index, k, x, q, p, verdict, emitted, draft_s, target_s, time.perf_counter() - t0,
                            proposal.draft_view, draft_head_s=draft_head_s, target_head_s=target_head_s)

    def _tree_round(self, index: int, levels: int) -> Round:
        """draft a tree (one draft pass per level) -> verify every node in one target pass -> walk -> commit."""
        t0, cfg = time.perf_counter(), self.cfg
        with self._clock.running():
            if cfg.tree.chained:  # the chain the drafter drafts anyway, plus sibling leaves
                tree = grow_chain(self.drafter, self.committed, cfg.tree, cfg, levels, self.generator,
                                  self.sibling_value)
            else:
                tree = grow(self.drafter, self.committed, cfg.tree, cfg, levels, self.generator, self.tree_value)
        draft_head_s, draft_s = self._clock.take_head(), self._clock.take()
        with self._clock.running():
            logits = verify_tree(self.target, self.committed, tree)
            p = logits_to_probs(logits, cfg.temperature, cfg.top_k, cfg.top_p)
        target_head_s, target_s = self._clock.take_head(), self._clock.take()
        verdict = walk(tree, p, logits, cfg, self.generator)
        if self.tree_value is not None:
            self.tree_value.observe_round(tree, verdict.tries)
        if self.sibling_value is not None and tree.positions:
            self.sibling_value.observe_round(tree, verdict, None if cfg.greedy else p)
        keep_path(self.target, self.drafter, tree, verdict.path, logits)
        emitted = commit(self.committed, tree.path_tokens(verdict.path) + [verdict.next_token], self.trace)
        return record_tree_round(cfg, index, tree, p, verdict, emitted, draft_s, target_s, time.perf_counter() - t0,
                                 cfg.tree.children_for(cfg.greedy), draft_head_s=draft_head_s,
                                 target_head_s=target_head_s)

    def _draft(self, k: int) -> Proposal:
        if k == 0:
            return Proposal.of([], [], self.target.device)
        return self.drafter.propose(self.committed, k, self.generator)

    def _verify_pass(self, drafted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One target forward over the pending token(s) and all drafts: p_1..p_{m+1}, (m+1, V), and the logits."""
        logits = self.target.extend(self.committed, drafted.tolist())
        cfg = self.cfg
        return logits_to_probs(logits, cfg.temperature, cfg.top_k, cfg.top_p), logits


# -- the steps both decoders share (batch.py runs them per row) ----------------------------------------
def verified_q(cfg: DecodeConfig, proposal: Proposal, vocab_size: int, dtype) -> torch.Tensor:
    """q as the accept step takes it, (m, V): what each draft was drawn from; a draft that took its argmax while the
    target samples (cfg.draft_greedy) drew from a point mass at it, whatever its q."""
    if cfg.draft_greedy and not cfg.greedy:
        return point_mass(proposal.tokens, vocab_size, dtype)
    return proposal.q_on(vocab_size, dtype)


def accept(cfg: DecodeConfig, p: torch.Tensor, logits: torch.Tensor, q: torch.Tensor, x: torch.Tensor,
           generator: torch.Generator | None) -> Verdict:
    """The accept step for drafts x (m,): greedy keeps x_i while it is the target's argmax (logits (m+1, V));
    sampling keeps x_i while u_i < min(1, p_i(x_i) / q_i(x_i)), then draws the residual or bonus token (cfg.verify
    "block": the chain as one block, ``verify_block``). Another cfg.rule (specviz.rules) replaces that test and what a
    rejection emits."""
    if cfg.rule != "leviathan" and len(x):  # nothing drafted (autoregressive): the target's own token, any rule
        return verify_rule(rule_of(cfg), p, q, x, generator, logits if cfg.greedy else None)
    if cfg.greedy:
        return verify_greedy(logits, x)
    return (verify_block if cfg.verify == "block" else verify)(p, q, x, generator)


def record_round(cfg: DecodeConfig, index, k, x, q, p, verdict, emitted, draft_s, target_s, wall_s,
                 draft_view=None, *, draft_head_s=None, target_head_s=None) -> Round:
    """The Round record of one verified proposal x (m,) with its q (m, V) and p (m+1, V), and (a draft with another
    tokenizer) the draft's own tokens; shared by the single-prompt and the batched decoders. Without cfg.record
    only what generation needs is kept. The heads' shares: where the passes' forwards timed them (``head_clock``)."""
    times = dict(draft_s=draft_s, target_s=target_s, wall_s=wall_s, draft_head_s=draft_head_s,
                 target_head_s=target_head_s)
    n, m = verdict.n_accepted, len(x)
    resampled, bonus = drawn(verdict.rejected, verdict.next_token, n, emitted)
    if not cfg.record:
        return Round.unrecorded(index=index, k=k, drafted=tuple(x.tolist()), n_accepted=n, emitted=tuple(emitted),
                                resampled=resampled, bonus=bonus, **times)
    idx = torch.arange(m, device=x.device)
    verified = m if cfg.verify == "block" and not cfg.greedy else min(n + 1, m)  # positions the verify step
    # actually looked at (a block: every draft)
    if cfg.greedy:
        b = (p[:m].argmax(-1) == q.argmax(-1)).to(p.dtype)[:verified].tolist()
    else:
        b = beta(p[:verified], q[:verified]).tolist()
    u = verdict.u[:verified].tolist() if verdict.u is not None else []
    rule_accept, rule_tv = ([], []) if cfg.rule == "leviathan" else closed_forms(rule_of(cfg), p[:verified],
                                                                                 q[:verified], cfg.greedy)
    return Round(
        index=index, k=k, drafted=tuple(x.tolist()), q=tuple(q[idx, x].tolist()), p=tuple(p[idx, x].tolist()),
        accept_prob=tuple(verdict.accept_prob.tolist()), u=pad(u, m), beta=pad(b, m), n_accepted=n,
        emitted=tuple(emitted), resampled=resampled, bonus=bonus, next_p=float(p[n, verdict.next_token]),
        residual_top=residual_top(verdict.residual, p[n], q[n] if n < m else None), **times,
        draft_view=draft_view, rule_accept=pad(rule_accept, m) if rule_accept else (),
        rule_tv=pad(rule_tv, m) if rule_tv else (),
    )


def _sibling_estimate(drafter: Drafter | None, cfg: DecodeConfig) -> SiblingEstimate | None:
    """Where a chain's siblings pay (None: no chain with siblings): greedy, learnt across the drafter's runs (the
    text is the target's either way); sampled, this run's own, so that a seed replays the same text."""
    if drafter is None or cfg.tree is None or not cfg.tree.chained:
        return None
    return drafter.sibling_estimate() if cfg.greedy else SiblingEstimate()


def speculative_generate(target, draft, input_ids: torch.Tensor, cfg: DecodeConfig | None = None,
                         tokenizer=None) -> Trace:
    """Speculative decoding of ``target`` with ``draft`` (a causal LM sharing its tokenizer, or a Drafter).
    With ``tokenizer`` the trace records every token's text and bytes (``Trace.fill_texts``): its table and
    views then read in any script."""
    if draft is None:
        raise ValueError("speculative_generate needs a draft model or drafter; use autoregressive_generate for none")
    trace = Decoding(target, draft, input_ids, cfg).run()
    return trace.fill_texts(tokenizer) if tokenizer is not None else trace


def autoregressive_generate(target, input_ids: torch.Tensor, cfg: DecodeConfig | None = None,
                            tokenizer=None) -> Trace:
    """The baseline: same target, transforms, cache and timing, one token per target forward."""
    trace = Decoding(target, None, input_ids, cfg).run()
    return trace.fill_texts(tokenizer) if tokenizer is not None else trace


def prompt_list(input_ids) -> list[int]:
    if not isinstance(input_ids, torch.Tensor) or input_ids.dtype != torch.long or input_ids.dim() != 2:
        raise ValueError("input_ids must be a LongTensor of shape [1, n] (e.g. tokenizer(text, return_tensors='pt').input_ids)")
    if input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must hold one prompt (shape [1, n]), got shape {list(input_ids.shape)}; "
                         "decode batches with speculative_generate_batch")
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt is empty: give at least one token")
    return input_ids[0].tolist()


def check_window(prompt: list[int], cfg: DecodeConfig, target, drafter: Drafter | None) -> None:
    need = len(prompt) + cfg.max_new_tokens
    for who, window in (("target", context_window(target)), ("draft", drafter and drafter.window)):
        if window is not None and need > window:
            raise ValueError(
                f"prompt ({len(prompt)} tokens) + max_new_tokens ({cfg.max_new_tokens}) = {need} exceeds the "
                f"{who}'s context window of {window} tokens: shorten the prompt or lower max_new_tokens"
            )


def run_names(target, drafter: Drafter | None, target_name: str | None = None,
              draft_name: str | None = None) -> tuple[str, str | None]:
    """(target name, draft name) for a trace, the given ones first; no drafter: None (autoregressive)."""
    target_name = target_name or model_name(target)
    return target_name, None if drafter is None else (draft_name or drafter.name)
