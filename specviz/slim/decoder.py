"""The decoder of ``specviz.decoder`` in numpy: rounds of draft -> verify -> accept -> commit on a forward that returns
numpy logits, recorded as the same ``Round`` and ``Trace``. The forward holds every committed token but the last
round's final one, which the next round's one pass takes first (as ``runtime.lm.CachedLM`` does)."""
from __future__ import annotations

import os
import time
from collections.abc import Iterator

import numpy as np

from ..commit import commit
from ..config import DecodeConfig
from ..kpolicy import make_policy
from ..trace import Round, Trace, drawn, pad
from . import sampling as S
from .drafts import Hybrid, Lookup, ModelDraft
from .feature_draft import FeatureDraft


class SlimDecoding:
    """One run on ``forward`` (``decode``, ``crop``, ``length``, ``vocab`` and, optionally, ``limit``): iterate it for
    rounds as they happen; ``trace`` fills in as it goes. ``draft``: None (autoregressive), a ``Lookup``, a
    ``ModelDraft``, a ``FeatureDraft`` or a ``Hybrid`` of a lookup and one of them (one run at a time: its cache
    follows the run). The trace names the target ``target_name`` (default: the forward's file name, else its class)
    and ends at ``eos``'s ids (``Vocab.eog`` for a GGUF's own)."""

    def __init__(self, forward, prompt, cfg: DecodeConfig | None = None,
                 draft: Lookup | ModelDraft | FeatureDraft | Hybrid | None = None, *, target_name: str | None = None, eos=(),
                 forward_name: str | None = None):
        cfg = cfg or DecodeConfig()
        check_run(forward, prompt, cfg, draft)
        self.fwd, self.cfg, self.draft = forward, cfg, draft
        self.rng = np.random.default_rng(cfg.seed)
        self.committed = [int(t) for t in prompt]
        target_name = target_name or os.path.basename(str(getattr(forward, "path", ""))) or type(forward).__name__
        self.trace = Trace.start(self.committed, cfg, target_name, None if draft is None else draft.name,
                                 [int(e) for e in eos])
        self.trace.forward = forward_name or getattr(forward, "forward_name", "llamacpp")
        self.todo: list[int] = []  # committed tokens the forward has not taken yet (the last round's final one)
        self.last: np.ndarray | None = None  # the logits after the forward's last token, while todo is empty

    def __iter__(self) -> Iterator[Round]:
        cfg, trace, policy = self.cfg, self.trace, make_policy(self.cfg)
        t0 = time.perf_counter()
        self._prefill()
        while len(trace.new_tokens) < cfg.max_new_tokens and not trace.stop_reason:
            left = cfg.max_new_tokens - len(trace.new_tokens)
            k = 0 if self.draft is None else min(policy.k, left - 1)  # never draft past the budget
            r = self._round(len(trace.rounds), k)
            trace.rounds.append(r)
            policy.update(r)
            trace.total_s = time.perf_counter() - t0
            yield r
            t0 = time.perf_counter() - trace.total_s  # the consumer's time between rounds is not the run's
        trace.stop_reason = trace.stop_reason or "length"

    def run(self) -> Trace:
        for _ in self:
            pass
        return self.trace

    def _prefill(self) -> None:
        t0 = time.perf_counter()
        self.fwd.crop(0)
        self.last = np.array(self.fwd.decode(np.asarray(self.committed, dtype=np.int32))[-1:])  # p_1's logits
        self.trace.prefill_s = time.perf_counter() - t0

    def _round(self, index: int, k: int) -> Round:
        """draft -> verify -> accept -> commit, timed; the round's record."""
        t0, cfg = time.perf_counter(), self.cfg
        drafted, q = self.draft.propose(self.committed, k, cfg, self.rng) if k else ([], None)
        if cfg.record and isinstance(q, S.DraftQ):
            q = q.dense()  # the record reads every row whole
        x = np.asarray(drafted, dtype=np.int64)
        t1, draft_head = time.perf_counter(), getattr(self.draft, "head_seconds", None) if k else None
        logits, target_head = self._verify_pass(x)
        p = S.logits_to_probs(logits, cfg.temperature, cfg.top_k, cfg.top_p) if cfg.record else None  # for the record
        t2 = time.perf_counter()
        if (q is None and (cfg.record or not cfg.greedy)) or (cfg.draft_greedy and not cfg.greedy):
            q = S.point_mass(x, logits.shape[-1])  # a point mass at each draft: what it was drawn from
        if cfg.greedy:  # greedy decides on the logits
            verdict = S.verify_greedy(logits, x)
        elif cfg.verify == "block":  # the chain as one block; each row's p read where the walk down reaches it
            rows = S.RowProbs(logits, cfg.temperature, cfg.top_k, cfg.top_p, getattr(self.fwd, "threads", 1), p)
            verdict = S.verify_block(rows, q, x, self.rng, keep=cfg.record)
        elif p is not None:
            verdict = S.verify(p, q, x, self.rng)
        else:  # no record: each row's p only when the walk reaches it
            verdict = S.verify_rows(logits, q, x, self.rng, cfg.temperature, cfg.top_k, cfg.top_p,
                                    threads=getattr(self.fwd, "threads", 1), keep=False)
        self.fwd.crop(len(self.committed) + verdict.n_accepted)  # the drafts kept stay in the forward's cache
        emitted = commit(self.committed, x[: verdict.n_accepted].tolist() + [verdict.next_token], self.trace)
        self.todo = [emitted[-1]]
        return record_round(cfg, index, k, x, q, p, verdict, emitted, t1 - t0, t2 - t1, time.perf_counter() - t0,
                            draft_head, target_head)

    def _verify_pass(self, x: np.ndarray) -> tuple[np.ndarray, float | None]:
        """ONE forward over the token not yet taken and every draft: the logits at p_1..p_{m+1}, (m+1, V), and the
        pass's head time where the forward times it apart (``head_seconds``; None otherwise, or with no pass)."""
        rows = np.asarray(self.todo + x.tolist(), dtype=np.int32)
        if not self.todo:  # the first round: p_1 came with the prompt
            out = self.last if len(rows) == 0 else np.concatenate([self.last, self.fwd.decode(rows)])
        else:  # read within this round, before the forward's next pass (llama.cpp's rows are a view of its buffer)
            out = self.fwd.decode(rows)
        head = getattr(self.fwd, "head_seconds", None) if len(rows) else None
        self.todo, self.last = [], None
        return out, head


def record_round(cfg: DecodeConfig, index, k, x, q, p, verdict: S.Verdict, emitted, draft_s, target_s, wall_s,
                 draft_head_s=None, target_head_s=None) -> Round:
    """The Round of one verified proposal x (m,), as ``specviz.decoder.record_round`` records it (the heads' times
    where the draft and the forward time them apart)."""
    times = dict(draft_s=draft_s, target_s=target_s, wall_s=wall_s, draft_head_s=draft_head_s,
                 target_head_s=target_head_s)
    n, m = verdict.n_accepted, len(x)
    resampled, bonus = drawn(verdict.rejected, verdict.next_token, n, emitted)
    drafted = tuple(int(t) for t in x)
    if not cfg.record:
        return Round.unrecorded(index=index, k=k, drafted=drafted, n_accepted=n, emitted=tuple(emitted),
                                resampled=resampled, bonus=bonus, **times)
    idx, verified = np.arange(m), m if cfg.verify == "block" and not cfg.greedy else min(n + 1, m)  # a block: all
    if cfg.greedy:
        b = (p[:m].argmax(-1) == q.argmax(-1)).astype(np.float32)[:verified].tolist()
    else:
        b = S.beta(p[:verified], q[:verified]).tolist()
    u = verdict.u[:verified].tolist() if verdict.u is not None else []
    return Round(
        index=index, k=k, drafted=drafted, q=tuple(q[idx, x].tolist()), p=tuple(p[idx, x].tolist()),
        accept_prob=tuple(verdict.accept_prob.tolist()), u=pad(u, m), beta=pad(b, m), n_accepted=n,
        emitted=tuple(emitted), resampled=resampled, bonus=bonus, next_p=float(p[n, verdict.next_token]),
        residual_top=S.residual_top(verdict.residual, p[n], q[n] if n < m else None), **times)


def check_run(forward, prompt, cfg: DecodeConfig, draft) -> None:
    """What slim runs, checked before any work: a DecodeConfig without a tree or another accept rule, a draft of its
    own kinds that fits the target's vocabulary, a prompt of ids in the forward's vocabulary that fits its limit
    with max_new_tokens."""
    if not isinstance(cfg, DecodeConfig):
        raise ValueError(f"cfg must be a specviz.DecodeConfig, got {type(cfg).__name__}")
    if draft is not None and not isinstance(draft, (Lookup, ModelDraft, FeatureDraft, Hybrid)):
        raise ValueError(f"specviz.slim drafts with slim.Lookup, slim.ModelDraft, slim.FeatureDraft or slim.Hybrid, got "
                         f"{type(draft).__name__}: any other draft needs the torch decoder (specviz.speculative_generate)")
    if draft is not None and (why := draft.fits(int(forward.vocab))):
        raise ValueError(why)
    if cfg.tree is not None or cfg.rule != "leviathan":
        raise ValueError("specviz.slim runs chains with Leviathan's accept rule: a token tree or another rule needs "
                         "the torch decoder")
    ids = list(prompt)
    if not ids or not all(isinstance(t, (int, np.integer)) and 0 <= t < forward.vocab for t in ids):
        raise ValueError(f"the prompt must be a non-empty list of token ids in [0, {forward.vocab})")
    for who, fwd in (("target", forward), ("draft", getattr(draft, "fwd", None))):
        limit = getattr(fwd, "limit", None)
        if limit is not None and len(ids) + cfg.max_new_tokens > limit:
            raise ValueError(f"prompt ({len(ids)} tokens) + max_new_tokens ({cfg.max_new_tokens}) exceeds the "
                             f"{who}'s {limit} positions: shorten the prompt or lower max_new_tokens")


def autoregressive(forward, prompt, cfg: DecodeConfig | None = None, **names) -> Trace:
    """The baseline on ``forward``: one target token per pass, the same transforms and records."""
    return SlimDecoding(forward, prompt, cfg, None, **names).run()


def speculative(forward, draft: Lookup | ModelDraft | FeatureDraft | Hybrid, prompt, cfg: DecodeConfig | None = None,
                **names) -> Trace:
    if draft is None:
        raise ValueError("speculative needs a draft (slim.Lookup, slim.ModelDraft, slim.FeatureDraft or slim.Hybrid); "
                         "use autoregressive for none")
    return SlimDecoding(forward, prompt, cfg, draft, **names).run()


def fill_texts(trace: Trace, vocab) -> Trace:
    """Every id the trace mentions, its text and bytes from ``vocab.piece`` (``llamacpp_seq.Vocab``). The trace."""
    ids = set(trace.prompt_ids)
    for r in trace.rounds:
        ids.update(r.drafted, r.emitted, (t[0] for t in r.residual_top))
    for i in ids - trace.token_text.keys():
        piece = vocab.piece(i)
        trace.token_text[i], trace.token_bytes[i] = piece.decode("utf-8", "replace"), piece.hex()
    return trace
