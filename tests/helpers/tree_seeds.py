"""For the law tests of drafts that decode one prompt at a time (token trees, a feature draft): the first two tokens of
many seeded runs of one prompt, each seed's run replayed from the models' answers, each answer computed once.

A run's draws depend on its seed and on what it reads: the target's logits after the committed text and after each
drafted path, and the drafter's answers to the round's calls. The target's logits depend on the context alone, and a
drafter's answers on the calls a round makes after the committed text, so a few hundred seeds already meet every one
that the first two tokens can reach. Each is computed once by the real target and drafter, and each seed's rounds run
the decoder's own steps on them (``grow`` / ``grow_chain`` / ``propose``, ``walk`` / ``accept``, ``commit``, the
round's record and the run's value estimates), drawing from a generator seeded as ``Decoding`` seeds its own. The
first ``PINNED`` seeds are checked against their full single-seed runs, every round's record bit for bit (drafts, q,
p, verdicts, u, nodes) but its timings, before the counts are taken: the counts are those of the decoder's runs.
"""
from __future__ import annotations

from dataclasses import replace

import torch

from specviz import Decoding
from specviz.config import DecodeConfig, eos_ids
from specviz.decoder import accept, commit, record_round, verified_q
from specviz.drafts.drafter import Drafter, ModelDrafter, as_drafter, draft_loop
from specviz.drafts.self_drafts import FeatureDrafter
from specviz.runtime.lm import CachedLM
from specviz.sampling import logits_to_probs
from specviz.trace import Round, Trace
from specviz.trees.chain import grow_chain
from specviz.trees.round import record_tree_round
from specviz.trees.tree import ROOT, DraftTree, grow, walk
from specviz.trees.value import AcceptanceEstimate, SiblingEstimate
from tests.helpers.stats import PINNED, decided


class TargetRows:
    """The target's logits after a context (the prompt and what follows it), each context computed once on one cache
    fed the prompt: the tokens past the prompt fed in one pass, then rolled back to the prompt."""

    def __init__(self, target, prompt: list[int]):
        self.target, self.prompt = target, list(prompt)
        self.lm = CachedLM(target, trees=True)
        self.rows = {tuple(prompt): self.lm.feed(self.prompt)[-1]}

    def after(self, context: tuple[int, ...]) -> torch.Tensor:
        if context not in self.rows:
            if list(context[: len(self.prompt)]) != self.prompt:
                raise ValueError("a context must start with the prompt")
            self.rows[context] = self.lm.feed(list(context[len(self.prompt):]))[-1].clone()
            self.lm.rollback(len(self.prompt))
            self.lm.last_logits = self.rows[tuple(self.prompt)]
        return self.rows[context]

    def of_tree(self, committed: list[int], tree: DraftTree) -> torch.Tensor:
        """(1 + len(tree), V): row 0 the logits after committed, row 1 + i after committed and node i's path."""
        paths = {ROOT: tuple(committed)}
        for i, (token, parent) in enumerate(zip(tree.tokens, tree.parents)):
            paths[i] = paths[parent] + (token,)
        return torch.stack([self.after(paths[n]) for n in range(ROOT, len(tree))])

    def of_chain(self, committed: list[int], drafted: list[int]) -> torch.Tensor:
        """(1 + len(drafted), V): the logits after committed and after each drafted token."""
        return torch.stack([self.after(tuple(committed + drafted[:i])) for i in range(len(drafted) + 1)])


class DraftRows(Drafter):
    """A drafter's answers to a round's calls, each distinct sequence of calls (after one committed text) answered
    once by a copy of the drafter started on the prompt as ``Decoding`` starts it, making the same calls in the same
    order: a tree round's ``tree_start`` and one ``tree_expand`` per level, or a chain's stepper, one drafted token a
    call. A second round (``replay`` makes at most two: one follows a first round that emitted one token, nothing
    accepted) gets a copy that first opened the first round as the seed's run did: ``tree_start`` after the prompt
    and ``tree_end`` with nothing accepted, or a stepper after the prompt. Tree rounds after one committed text share
    a copy: ``tree_start`` drops the tree the copy holds and keeps the logits after the committed text."""

    def __init__(self, drafter, target, prompt: list[int], cfg: DecodeConfig):
        self.drafter, self.target, self.prompt = as_drafter(drafter), target, list(prompt)
        self.cfg, self.vocab_size = cfg, target.get_output_embeddings().weight.shape[0]
        self.device, self.answers, self.calls, self.copies = torch.device("cpu"), {}, (), {}
        self.tree_copies = cfg.tree is not None and not cfg.tree.chained

    def _started(self, committed: tuple[int, ...]) -> Drafter:
        run, lm = self.drafter.fresh(), CachedLM(self.target, trees=self.cfg.tree is not None)
        run.attach(lm)
        lm.feed(self.prompt)
        run.start(self.prompt, self.cfg, self.vocab_size, lm.device)
        run.prefill(self.prompt)
        if list(committed) != self.prompt and self.tree_copies:
            run.tree_start(self.prompt)
            run.tree_end([])
        elif list(committed) != self.prompt:
            run.stepper(self.prompt)([])
        return run

    def _answer(self) -> torch.Tensor:
        """The answer to the round's latest tree call; a miss makes the round's calls so far on the copy."""
        if self.calls not in self.answers:
            committed = self.calls[0]
            run = self.copies[committed] = self.copies.get(committed) or self._started(committed)
            self.answers[self.calls[:1]] = run.tree_start(list(committed))
            for n in range(2, len(self.calls) + 1):
                self.answers[self.calls[:n]] = run.tree_expand(*map(list, self.calls[n - 1]))
        return self.answers[self.calls]

    def tree_start(self, committed):
        self.calls = (tuple(committed),)
        return self._answer()

    def tree_expand(self, nodes, tokens, parents):
        self.calls += ((tuple(nodes), tuple(tokens), tuple(parents)),)
        return self._answer()

    def stepper(self, committed):
        """The drafter's stepper after committed, its logits after each drafted prefix taken from a fresh copy's."""
        def next_logits(drafted: list[int]) -> torch.Tensor:
            key = ("chain", tuple(committed), tuple(drafted))
            if key not in self.answers:
                step = self._started(tuple(committed)).stepper(list(committed))
                for n in range(len(drafted) + 1):
                    self.answers["chain", tuple(committed), tuple(drafted[:n])] = step(list(drafted[:n]))
            return self.answers[key]

        return next_logits

    def propose(self, committed, k, generator):
        """A chain as a model draft or a feature draft proposes it (``draft_loop`` over its stepper)."""
        if not isinstance(self.drafter, (ModelDrafter, FeatureDrafter)):
            raise ValueError(f"{self.drafter.name}'s chains are not replayed: only a model or a feature draft's")
        return draft_loop(self.stepper(committed), k, self.cfg, self.vocab_size, generator, self.device)


def _tree_round(models: tuple, committed: list[int], cfg: DecodeConfig, levels: int, generator, trace: Trace,
                estimates: tuple) -> Round:
    """A tree round as ``Decoding._tree_round`` makes it, on the models' answers."""
    target_rows, draft_rows = models
    value, siblings = estimates
    if cfg.tree.chained:
        tree = grow_chain(draft_rows, committed, cfg.tree, cfg, levels, generator, siblings)
    else:
        tree = grow(draft_rows, committed, cfg.tree, cfg, levels, generator, value)
    logits = target_rows.of_tree(committed, tree)
    p = logits_to_probs(logits, cfg.temperature, cfg.top_k, cfg.top_p)
    verdict = walk(tree, p, logits, cfg, generator)
    if value is not None:
        value.observe_round(tree, verdict.tries)
    if siblings is not None and tree.positions:
        siblings.observe_round(tree, verdict, None if cfg.greedy else p)
    emitted = commit(committed, tree.path_tokens(verdict.path) + [verdict.next_token], trace)
    return record_tree_round(cfg, len(trace.rounds), tree, p, verdict, emitted, 0.0, 0.0, 0.0,
                             cfg.tree.children_for(cfg.greedy))


def _chain_round(models: tuple, committed: list[int], cfg: DecodeConfig, k: int, generator, trace: Trace) -> Round:
    """A chain round as ``Decoding._round`` makes it (a fixed k), on the models' answers."""
    target_rows, draft_rows = models
    proposal = draft_rows.propose(committed, k, generator)
    x = proposal.tokens
    logits = target_rows.of_chain(committed, x.tolist())
    p = logits_to_probs(logits, cfg.temperature, cfg.top_k, cfg.top_p)
    q = verified_q(cfg, proposal, p.shape[-1], p.dtype)
    verdict = accept(cfg, p, logits, q, x, generator)
    emitted = commit(committed, x[: verdict.n_accepted].tolist() + [verdict.next_token], trace)
    return record_round(cfg, len(trace.rounds), k, x, q, p, verdict, emitted, 0.0, 0.0, 0.0, proposal.draft_view)


def replay(models: tuple, prompt: list[int], cfg: DecodeConfig, seed: int) -> Trace:
    """Seed ``seed``'s run of ``models`` (TargetRows, DraftRows), its rounds as ``Decoding`` makes them, stopped
    once two tokens are out (a later round cannot change them)."""
    generator = torch.Generator().manual_seed(seed)
    committed, tree = list(prompt), cfg.tree
    trace = Trace.start(committed, replace(cfg, seed=seed), "target", "draft", eos_ids(models[0].target))
    value = AcceptanceEstimate() if tree is not None and tree.dynamic else None
    siblings = SiblingEstimate() if tree is not None and tree.chained else None
    while len(trace.new_tokens) < min(2, cfg.max_new_tokens) and not trace.stop_reason:
        left = cfg.max_new_tokens - len(trace.new_tokens)
        if tree is not None:
            r = _tree_round(models, committed, cfg, min(tree.levels, left - 1), generator, trace, (value, siblings))
        else:
            r = _chain_round(models, committed, cfg, min(cfg.k, left - 1), generator, trace)
        trace.rounds.append(r)
    return trace


def untimed(trace: Trace) -> list[Round]:
    """A trace's rounds without their timings: every draft, q, p, verdict, u and node, bit for bit."""
    return [replace(r, draft_s=0.0, target_s=0.0, wall_s=0.0, draft_head_s=None, target_head_s=None) for r in trace.rounds]


def first_two_of_seeds(target, drafter, prompt: torch.Tensor, cfg: DecodeConfig, runs: int):
    """(counts (V, V) of the first two tokens, each run's first round) over seeds 0..runs-1 of a sampled run of one
    prompt; seeds 0..PINNED-1 are checked against their full single-seed runs first."""
    if cfg.greedy or cfg.k_policy != "fixed" or cfg.rule != "leviathan" or cfg.draft_greedy or cfg.draft_stop:
        raise ValueError("replayed runs sample with a fixed k and the standard rule (no draft_greedy, no draft_stop)")
    ids = prompt[0].tolist()
    models = TargetRows(target, ids), DraftRows(drafter, target, ids, cfg)
    traces = [replay(models, ids, cfg, seed) for seed in range(runs)]
    for seed in range(min(PINNED, runs)):
        full, trace = Decoding(target, drafter, prompt, replace(cfg, seed=seed)).run(), traces[seed]
        same = decided(trace) == decided(full)[: len(trace.rounds)] and trace.new_tokens[:2] == full.new_tokens[:2]
        assert same and untimed(trace) == untimed(full)[: len(trace.rounds)], \
            f"seed {seed}'s replayed run drew otherwise than its full run"
    V = target.config.vocab_size
    counts = torch.zeros(V, V)
    for trace in traces:
        counts[trace.new_tokens[0], trace.new_tokens[1]] += 1
    return counts, [trace.rounds[0] for trace in traces]
