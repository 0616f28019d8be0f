"""Batched speculative and autoregressive generation: several prompts decoded together.

Notation as in ``specviz.sampling``: p target, q draft. Each batch round is the single-prompt round
(draft -> verify -> accept -> commit) for every active row at once: the draft runs k batched steps, the
target verifies every row's drafts in ONE batched forward, then each row accepts its own number of tokens.

The forward: each model's rows run on ``BatchLM``, the lean forward's C layers where single runs use them (ONE C call
a pass for every row's tokens, each row over its own region of one cache, rolled back by position:
``runtime.batch_lean``), else transformers' DynamicCache as below; each trace's ``forward`` says which ran.

Uneven acceptance on the DynamicCache, by masking. Every model keeps one DynamicCache over a padded time axis
shared by the rows, with a key mask (B, T) and, per row, the ids and columns of its cached tokens. A forward appends one
chunk per row, right-aligned (left-padded, pads masked out); a row's position id is its count of real
tokens so far, so holes and padding never shift positions. When a row rejects drafts, their columns are
masked out forever (``BatchLM.sync``, the batched ``CachedLM.sync``): caches stay append-only, and only the
columns past the furthest kept column of any row are cropped. As in ``CachedLM``, each row keeps the logits
after its last cached token, so the prefill of the whole prompt serves the first round. Finished rows (EOS, max_new_tokens) leave
the batch (``BatchLM.keep_rows``: the cache's own ``batch_select_indices``), so later rounds compute only
the rows still generating; their trace is final. ``BatchDecoding.live`` maps the models' rows to prompts.

RNG: one ``torch.Generator`` per row, seeded ``cfg.seed + row``, drawn in the single-prompt order, so row b
makes exactly the draws of ``speculative_generate(prompt_b, seed=cfg.seed + b)`` and reproduces its trace
(bit for bit on the lean forward's C layers; on the DynamicCache up to the floating-point difference between
batched and unbatched matmuls).

Timing: ``draft_s``, ``target_s`` and ``wall_s`` of a row's Round are the BATCH's times for that round
(shared by every row in it); ``prefill_s`` is the batch prefill; ``total_s`` is the batch's working time until
that row finished. A batch uses one k for every row (``k_policy='fixed'``), capped per row by its budget.
"""
from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from .config import DecodeConfig, eos_ids
from .decoder import accept, check_window, commit, prompt_list, record_round, run_names, verified_q
from .drafts.drafter import Drafter, ModelDrafter, Proposal, as_drafter, draft_step, draft_view
from .drafts.pairing import check_fits
from .runtime.batch_lm import BatchLM
from .runtime.forwards import check_columns
from .runtime.lm import Stopwatch
from .sampling import logits_to_probs
from .trace import Round, Trace


class BatchDecoding:
    """One batched run. Iterate it to get, per batch round, each row's Round (None for finished rows)."""

    def __init__(self, target, draft, prompts: list[torch.Tensor], cfg: DecodeConfig | None = None,
                 target_name: str | None = None, draft_name: str | None = None):
        cfg = cfg or DecodeConfig()
        if not isinstance(cfg, DecodeConfig):
            raise ValueError(f"cfg must be a specviz.DecodeConfig, got {type(cfg).__name__}")
        if cfg.k_policy != "fixed":
            raise ValueError(f"batched decoding drafts one k for every row: use k_policy='fixed', not {cfg.k_policy!r}")
        if cfg.tree is not None and draft is not None:
            raise ValueError("batched decoding drafts chains: decode token trees one prompt at a time (tree=None here)")
        if not isinstance(prompts, (list, tuple)) or not prompts:
            raise ValueError("list_of_input_ids must be a non-empty list of [1, n] LongTensors, one per prompt")
        self.cfg, self.prompts = cfg, [prompt_list(ids) for ids in prompts]
        _check_ids(self.prompts, target.get_input_embeddings().weight.shape[0])
        self.drafter: Drafter | None = None if draft is None else as_drafter(draft).fresh()  # this run's own copy
        if self.drafter is not None:
            check_fits(target, self.drafter)
        for prompt in self.prompts:
            check_window(prompt, cfg, target, self.drafter)
        check_columns([target, self.drafter.model if isinstance(self.drafter, ModelDrafter) else None],
                      max(map(len, self.prompts)) + cfg.max_new_tokens * (cfg.k + 2 if draft is not None else 1))
        B = len(self.prompts)
        self.target = BatchLM(target, B)
        self.vocab_size = target.get_output_embeddings().weight.shape[0]
        self.draft_lm = BatchLM(self.drafter.model, B) if isinstance(self.drafter, ModelDrafter) else None
        self.n_embed = self.drafter.model.get_input_embeddings().weight.shape[0] if self.draft_lm else None
        if self.drafter is not None and self.draft_lm is None:  # model-free: proposals row by row
            self.drafter.start(self.prompts[0], cfg, self.vocab_size, self.target.device)
        self.generators = [torch.Generator(device=self.target.device).manual_seed(cfg.seed + b) for b in range(B)]
        self.committed = [list(p) for p in self.prompts]
        self.live = list(range(B))  # the prompts still generating: live[s] is the models' row s
        names = run_names(target, self.drafter, target_name, draft_name)
        self.traces = [Trace.start(p, cfg, *names, eos_ids(target)) for p in self.prompts]
        for trace in self.traces:
            trace.forward = self.target.forward_name  # the target's forward: "lean-c" or "dynamic"
        self._clock = Stopwatch(self.target.device)

    def left(self, b: int) -> int:
        """Tokens row b may still generate (counted on what it committed, before its Round is recorded)."""
        return self.cfg.max_new_tokens - (len(self.committed[b]) - len(self.prompts[b]))

    def done(self, b: int) -> bool:
        """Row b emitted EOS or used its budget."""
        return bool(self.traces[b].stop_reason) or self.left(b) <= 0

    def __iter__(self) -> Iterator[list[Round | None]]:
        """Each batch round's Rounds (None for rows already finished); total_s counts the batch's own work,
        not the consumer's time between rounds."""
        index, work = 0, Stopwatch(self.target.device)
        with work.running():
            self._prefill()
        while not all(self.done(b) for b in range(len(self.traces))):
            with work.running():
                rounds = self._round(index)
            for b, r in enumerate(rounds):
                if r is not None:
                    self.traces[b].rounds.append(r)
                    self.traces[b].total_s = work.seconds
                    if self.done(b):
                        self.traces[b].stop_reason = self.traces[b].stop_reason or "length"
            index += 1
            yield rounds
        for trace in self.traces:
            trace.stop_reason = trace.stop_reason or "length"

    def run(self) -> list[Trace]:
        for _ in self:
            pass
        return self.traces

    def _prefill(self) -> None:
        with self._clock.running():
            self.target.feed(self.committed)  # each row's last logits are p_1 of its first round
            if self.draft_lm is not None:
                self.draft_lm.feed([self._visible(c) for c in self.committed])
        prefill_s = self._clock.take()
        for trace in self.traces:
            trace.prefill_s = prefill_s

    def _round(self, index: int) -> list[Round | None]:
        """draft -> verify -> accept -> commit for every live row; each row's Round (None: finished before)."""
        t0, cfg = time.perf_counter(), self.cfg
        ks = {b: min(cfg.k, self.left(b) - 1) if self.drafter else 0 for b in self.live}  # never past the budget
        with self._clock.running():
            proposals = self._draft(ks)
        draft_head_s, draft_s = self._clock.take_head(), self._clock.take()
        with self._clock.running():
            ps, logits = self._verify_pass(proposals)
        target_head_s, target_s = self._clock.take_head(), self._clock.take()
        decided = {}  # row -> what record_round() needs
        for b in self.live:
            q, x = verified_q(cfg, proposals[b], ps[b].shape[-1], ps[b].dtype), proposals[b].tokens
            verdict = accept(cfg, ps[b], logits[b], q, x, self.generators[b])
            emitted = commit(self.committed[b], x[: verdict.n_accepted].tolist() + [verdict.next_token], self.traces[b])
            decided[b] = (index, ks[b], x, q, ps[b], verdict, emitted)
        self._drop_finished()
        wall_s = time.perf_counter() - t0
        return [record_round(cfg, *decided[b], draft_s, target_s, wall_s, draft_head_s=draft_head_s,
                             target_head_s=target_head_s) if b in decided else None for b in range(len(self.traces))]

    def _drop_finished(self) -> None:
        """Rows that finished leave both models' batches; columns no row uses any more are cropped."""
        keep = [s for s, b in enumerate(self.live) if not self.done(b)]
        for lm in (self.target, self.draft_lm):
            if lm is not None and keep:
                lm.keep_rows(keep)
                lm.compact()
        if keep:
            self.live = [self.live[s] for s in keep]

    # -- the steps, every live row at once ----------------------------------------------------------------
    def _draft(self, ks: dict[int, int]) -> dict[int, Proposal]:
        """Row b proposes up to ks[b] tokens, drawing from its own generator as the single-prompt drafter does."""
        if self.draft_lm is not None:
            return self._draft_batched(ks)
        empty = Proposal.of([], [], self.target.device)
        return {b: self.drafter.propose(self.committed[b], k, self.generators[b]) if k else empty
                for b, k in ks.items()}

    def _draft_batched(self, ks: dict[int, int]) -> dict[int, Proposal]:
        """The draft model steps every drafting row together (one batched forward per step); each row then
        takes its own ``draft_step`` (q, x, stop rule), so a row drafts exactly what ``draft_loop`` would."""
        cfg, lm, live = self.cfg, self.draft_lm, self.live
        tokens, qs = {b: [] for b in live}, {b: [] for b in live}
        going = [b for b in live if ks[b]]
        out = lm.extend([(self._visible(self.committed[b]), []) if b in going else None for b in live])
        logits = {b: out[s][-1] for s, b in enumerate(live) if b in going}  # lm row s is prompt live[s]
        while going:
            stepped, going = going, []
            for b in stepped:
                x, q, go_on = draft_step(logits[b], cfg, self.vocab_size, self.generators[b])
                tokens[b].append(x)
                qs[b].append(q)
                if go_on and len(tokens[b]) < ks[b]:
                    going.append(b)
            if going:  # feed x_i of every row still drafting
                out = lm.feed([tokens[b][-1:] if b in going else [] for b in live])
                logits = {b: out[s, -1] for s, b in enumerate(live) if b in going}
        return {b: Proposal.of(tokens[b], qs[b], self.target.device) for b in live}

    def _verify_pass(self, proposals: dict[int, Proposal]) -> tuple[dict, dict]:
        """ONE target forward over every live row's pending token(s) and drafts: per row p_1..p_{m+1}, logits."""
        cfg = self.cfg
        outs = self.target.extend([(self.committed[b], proposals[b].tokens.tolist()) for b in self.live])
        logits = dict(zip(self.live, outs))
        return {b: logits_to_probs(lg, cfg.temperature, cfg.top_k, cfg.top_p) for b, lg in logits.items()}, logits

    def _visible(self, ids: list[int]) -> list[int]:
        return draft_view(ids, self.n_embed, self.vocab_size)


def _check_ids(prompts: list[list[int]], vocab_size: int) -> None:
    """Every prompt's ids inside the target's vocabulary (an id outside it would index past the embedding table)."""
    for b, ids in enumerate(prompts):
        bad = next((i for i in ids if not 0 <= i < vocab_size), None)
        if bad is not None:
            raise ValueError(f"prompt {b} holds token id {bad}, outside the target's embedding table of {vocab_size}")


def speculative_generate_batch(target, draft, list_of_input_ids: list[torch.Tensor],
                               cfg: DecodeConfig | None = None) -> list[Trace]:
    """Speculative decoding of several prompts at once (each a [1, n] LongTensor); one Trace per prompt."""
    if draft is None:
        raise ValueError("speculative_generate_batch needs a draft; use autoregressive_generate_batch for none")
    return BatchDecoding(target, draft, list_of_input_ids, cfg).run()


def autoregressive_generate_batch(target, list_of_input_ids: list[torch.Tensor],
                                  cfg: DecodeConfig | None = None) -> list[Trace]:
    """The batched baseline: one target forward per token for every row at once; one Trace per prompt."""
    return BatchDecoding(target, None, list_of_input_ids, cfg).run()
