"""What a generation run did, round by round: frozen records, a Trace, its table and its JSON.

Notation as in ``specviz.sampling``: p target, q draft, u uniform draw, beta = sum min(p, q).
In greedy runs u is None, p and q are the models' plain softmax probabilities (their confidence),
and beta is 1.0 where the draft's argmax equals the target's argmax, else 0.0.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING

from .config import DecodeConfig
from .records import DraftTokens, TreeNode, TreeRecord  # noqa: F401 (re-exported: the records of a trace)
from .texts import Texts, fill_texts, position_texts
from .trace_schema import check_trace, loads, round_fields

if TYPE_CHECKING:  # imported where a frame is built (to_frame): a decode alone does not load pandas
    import pandas as pd

SCHEMA = "specviz.trace/1"
MAX_TRACE_BYTES = 4 * 2**20  # a trace JSON longer than this is refused before it is parsed


def drawn(rejected: bool, next_token: int, n_accepted: int, emitted) -> tuple[int | None, int | None]:
    """(resampled, bonus) of a round: the token drawn after the accepted drafts is the resample at a rejection, else
    the bonus; neither where an accepted draft was EOS (nothing drawn after it is kept: emitted holds n_accepted
    tokens or fewer)."""
    if len(emitted) <= n_accepted:
        return None, None
    return (next_token, None) if rejected else (None, next_token)


def pad(values: list, m: int) -> tuple:
    """A per-position field of m drafts: the values for the positions verified, None for those after."""
    return tuple(values) + (None,) * (m - len(values))


@dataclass(frozen=True, kw_only=True)
class Round:
    """One draft -> verify -> accept -> commit round (autoregressive runs: k = 0, one target token). Built by
    keyword; ``Round.unrecorded`` for a run that keeps only what generation needs (``DecodeConfig.record`` off)."""

    index: int
    k: int  # drafts requested this round (the k policy's choice, capped by the tokens left)
    drafted: tuple[int, ...]  # proposals x_1..x_m (m <= k: a model-free drafter may find fewer)
    q: tuple[float, ...]  # q_i(x_i)
    p: tuple[float, ...]  # p_i(x_i)
    accept_prob: tuple[float, ...]  # min(1, p/q) (greedy: 1.0 if x_i is the target's argmax, else 0.0)
    u: tuple[float | None, ...]  # uniform draw at each verified position; None if unverified or greedy
    beta: tuple[float | None, ...]  # sum_v min(p_i, q_i) at each verified position; None if unverified
    n_accepted: int  # drafts before this index accepted; the one at it (if any) rejected; later ones discarded
    emitted: tuple[int, ...]  # ids appended this round (accepted drafts, then the resample or bonus)
    resampled: int | None  # the token drawn at the rejection (sampling: from the residual; greedy: target argmax)
    bonus: int | None  # the token drawn from p_{m+1} when every draft was accepted
    next_p: float  # target probability of the resampled / bonus token at its position
    residual_top: tuple[tuple[int, float, float, float], ...]  # (token, residual, p, q), top of norm(max(0, p-q))
    draft_s: float  # wall time of the draft's forward passes (or the drafter's lookup)
    target_s: float  # wall time of the target's one verification pass
    wall_s: float  # wall time of the whole round, bookkeeping included
    # a tree round: the whole tree. Its chain fields then hold the accepted path and, after a rejection, the
    # stop node's first rejected child (so a timeline reads as for a chain); k and ``proposed`` count nodes
    tree: TreeRecord | None = None
    # a draft with another tokenizer: its proposal in its own tokens (the drafted ids are the target tokens)
    draft_view: DraftTokens | None = None
    # config.rule other than Leviathan's, per verified position: its P(accept) (specviz.rules), a lossy one's TV(law, p)
    rule_accept: tuple[float | None, ...] = ()
    rule_tv: tuple[float | None, ...] = ()
    # the LM head's share of draft_s and target_s (with the final norm where the forward runs them together): None
    # where the forward cannot time its head apart from its layers (llama.cpp's one decode call, old traces)
    draft_head_s: float | None = None
    target_head_s: float | None = None

    @classmethod
    def unrecorded(cls, *, index, k, drafted, n_accepted, emitted, resampled, bonus, draft_s, target_s,
                   wall_s, draft_head_s=None, target_head_s=None) -> Round:
        """A round with its outcome and times but no per-draft p, q, u or beta (nothing recorded)."""
        return cls(index=index, k=k, drafted=drafted, q=(), p=(), accept_prob=(), u=(), beta=(),
                   n_accepted=n_accepted, emitted=emitted, resampled=resampled, bonus=bonus, next_p=0.0,
                   residual_top=(), draft_s=draft_s, target_s=target_s, wall_s=wall_s, draft_head_s=draft_head_s,
                   target_head_s=target_head_s)

    @property
    def proposed(self) -> int:
        """Tokens the target verified for this round: the chain's drafts or the tree's nodes."""
        return len(self.tree.nodes) if self.tree is not None else len(self.drafted)

    @property
    def rejected(self) -> bool:
        return self.n_accepted < len(self.drafted)

    def status(self, i: int) -> str:
        """Fate of drafted position i: accepted, rejected or discarded (never verified)."""
        return "accepted" if i < self.n_accepted else ("rejected" if i == self.n_accepted else "discarded")


@dataclass(frozen=True)
class Summary:
    rounds: int
    new_tokens: int
    drafted: int
    accepted: int
    acceptance_rate: float  # accepted / drafted
    alpha: float  # mean beta over verified positions (Leviathan's alpha, estimated)
    tau: float  # mean tokens emitted per round, bonus included
    target_forwards_per_token: float
    tokens_per_s: float
    draft_s: float
    target_s: float
    total_s: float
    per_position: tuple[float, ...]  # P(position i accepted | position i drafted)


@dataclass(frozen=True)
class Counts:
    """What rounds add up to; ``+`` sums two (several runs: ``sum((t.counts() for t in traces), Counts())``).
    Rates are derived, so an aggregate's rates are pooled over its rounds, not averages of per-run rates."""

    rounds: int = 0
    new_tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    target_passes: int = 0  # target forwards the rounds ran (see target_passes)
    draft_s: float = 0.0
    target_s: float = 0.0
    total_s: float = 0.0  # wall time of the runs, prefill and bookkeeping included
    beta_sum: float = 0.0  # sum of beta over verified positions
    beta_n: int = 0  # verified positions with a beta
    drafted_at: tuple[int, ...] = ()  # [i]: rounds that drafted position i
    accepted_at: tuple[int, ...] = ()  # [i]: rounds that accepted position i (same length as drafted_at)

    @classmethod
    def of(cls, rounds, total_s: float = 0.0) -> Counts:
        rounds = list(rounds)
        betas = [b for r in rounds for b in r.beta if b is not None]
        depth = range(max((len(r.drafted) for r in rounds), default=0))
        return cls(
            rounds=len(rounds), new_tokens=sum(len(r.emitted) for r in rounds),
            drafted=sum(r.proposed for r in rounds), accepted=sum(r.n_accepted for r in rounds),
            target_passes=target_passes(rounds), draft_s=sum(r.draft_s for r in rounds),
            target_s=sum(r.target_s for r in rounds), total_s=total_s, beta_sum=sum(betas), beta_n=len(betas),
            drafted_at=tuple(sum(len(r.drafted) > i for r in rounds) for i in depth),
            accepted_at=tuple(sum(r.n_accepted > i for r in rounds) for i in depth),
        )

    def __add__(self, other: Counts) -> Counts:
        if not isinstance(other, Counts):
            return NotImplemented
        return Counts(**{f.name: _plus(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)})

    def __radd__(self, other):  # sum() without a start value begins with 0
        return self if other == 0 else NotImplemented

    @property
    def acceptance_rate(self) -> float:  # accepted / drafted
        return _ratio(self.accepted, self.drafted)

    @property
    def alpha(self) -> float:  # mean beta over verified positions: Leviathan's alpha, estimated
        return _ratio(self.beta_sum, self.beta_n)

    @property
    def tau(self) -> float:  # tokens emitted per round, bonus included
        return _ratio(self.new_tokens, self.rounds)

    @property
    def target_forwards_per_token(self) -> float:
        return _ratio(self.target_passes, self.new_tokens)

    @property
    def tokens_per_s(self) -> float:
        return _ratio(self.new_tokens, self.total_s)

    @property
    def per_position(self) -> tuple[float, ...]:  # P(position i accepted | position i drafted)
        return tuple(_ratio(a, d) for a, d in zip(self.accepted_at, self.drafted_at))


@dataclass
class Trace:
    prompt_ids: list[int]
    config: DecodeConfig
    mode: str = "speculative"  # or "autoregressive"
    target_name: str = ""
    draft_name: str = ""
    eos_token_ids: list[int] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    prefill_s: float = 0.0
    total_s: float = 0.0
    stop_reason: str = ""  # "eos", "length", "budget" (a server stopped it at its time budget) or "" while running
    token_text: dict[int, str] = field(default_factory=dict)  # id -> text, for replay without a tokenizer
    token_bytes: dict[int, str] = field(default_factory=dict)  # id -> its bytes in hex (part of a character, maybe)
    forward: str = ""  # the target's forward (runtime.lm.PATHS: "lean", "dynamic", "llamacpp", ...; "lean-c": the lean
    # forward's layers in C); "": not said

    @classmethod
    def start(cls, prompt_ids: list[int], config: DecodeConfig, target_name: str, draft_name: str | None,
              eos_token_ids: list[int]) -> Trace:
        """The empty trace of a run about to start; draft_name None: an autoregressive run (nothing drafted)."""
        mode = "autoregressive" if draft_name is None else "speculative"
        return cls(prompt_ids=list(prompt_ids), config=config, mode=mode, target_name=target_name,
                   draft_name=draft_name or "", eos_token_ids=list(eos_token_ids))

    @property
    def new_tokens(self) -> list[int]:
        return [t for r in self.rounds for t in r.emitted]

    def counts(self) -> Counts:
        return Counts.of(self.rounds, self.total_s)

    def summary(self) -> Summary:
        c = self.counts()
        return Summary(
            rounds=c.rounds, new_tokens=c.new_tokens, drafted=c.drafted, accepted=c.accepted,
            acceptance_rate=c.acceptance_rate, alpha=c.alpha, tau=c.tau,
            target_forwards_per_token=c.target_forwards_per_token, tokens_per_s=c.tokens_per_s,
            draft_s=c.draft_s, target_s=c.target_s, total_s=c.total_s, per_position=c.per_position,
        )

    def text(self, token: int) -> str:
        """The token decoded on its own (a token holding part of a character shows U+FFFD: use ``texts``)."""
        return self.token_text.get(token, f"<{token}>")

    def fill_texts(self, tokenizer) -> Trace:
        """Record the text and bytes of every id the trace mentions (prompt, drafts, tree nodes, emitted, residual
        candidates), so its JSON replays, in any script, without a tokenizer. Returns the trace."""
        fill_texts(self, tokenizer)
        return self

    def texts(self) -> Texts:
        """Every token's text at its place (``specviz.texts``): characters split across tokens read whole."""
        def bytes_of(t: int) -> bytes:
            hexed = self.token_bytes.get(t)
            return bytes.fromhex(hexed) if hexed is not None else self.text(t).encode("utf-8")
        return position_texts(self.prompt_ids, self.rounds, bytes_of)

    def to_frame(self, tokenizer=None) -> pd.DataFrame:
        """One row per token the run produced or considered: every drafted token (status accepted, rejected or
        discarded; drafted=True; a tree round: every node) and every resampled or bonus token (drafted=False).
        ``text`` is each token's text at its place; a tokenizer fills texts the trace lacks (``fill_texts``)."""
        if tokenizer is not None:
            self.fill_texts(tokenizer)
        rows = []
        for r, t in zip(self.rounds, self.texts().rounds):
            if r.tree is not None:  # a tree round: one row per node (position = depth), node and parent ids
                for j, nd in enumerate(r.tree.nodes):
                    rows.append(_row(t.nodes[j], r, nd.depth, nd.token, nd.status, True, nd.p, nd.q, nd.accept_prob,
                                     nd.u, None, j, nd.parent))
            else:
                for i, x in enumerate(r.drafted):
                    rows.append(_row(t.drafted[i], r, i, x, r.status(i), True, r.p[i], r.q[i], r.accept_prob[i],
                                     r.u[i], r.beta[i]))
            for status, tok in (("resampled", r.resampled), ("bonus", r.bonus)):
                if tok is not None:
                    text = t.emitted[r.n_accepted] if len(t.emitted) > r.n_accepted else self.text(tok)
                    rows.append(_row(text, r, r.n_accepted, tok, status, False, r.next_p, None, None, None, None))
        import pandas as pd  # only here: a decode that never builds a frame does not pay for it

        df = pd.DataFrame(rows, columns=FRAME_COLUMNS)
        return df.astype({"p": float, "q": float, "ratio": float, "accept_prob": float, "u": float, "beta": float})

    def to_json(self, baseline: Trace | None = None) -> str:
        """The whole record; with ``baseline`` (the autoregressive run it was measured against) that run too,
        so an imported trace shows its speedup again (``run_from_json``)."""
        data = self._data() | ({"baseline": baseline._data()} if baseline is not None else {})
        return json.dumps(data)

    def _data(self) -> dict:
        data = asdict(self)
        data["schema"] = SCHEMA
        data["token_text"] = {str(k): v for k, v in self.token_text.items()}
        data["token_bytes"] = {str(k): v for k, v in self.token_bytes.items()}
        return data

    @classmethod
    def from_json(cls, text: str) -> Trace:
        """The trace ``to_json`` wrote, every field checked (imported traces are rendered into HTML): a wrong
        type, an unknown mode or stop_reason, unequal per-token lists, n_accepted out of range: a ValueError."""
        return cls.run_from_json(text)[0]

    @classmethod
    def run_from_json(cls, text: str) -> tuple[Trace, Trace | None]:
        """(trace, its baseline run or None), both checked as ``from_json`` checks a trace."""
        if len(text) > MAX_TRACE_BYTES:
            raise ValueError(f"the trace is {len(text) / 2**20:.1f} MiB; at most {MAX_TRACE_BYTES / 2**20:.0f} MiB "
                             "is read")
        try:
            data = loads(text)
            base = data.pop("baseline", None) if isinstance(data, dict) else None
            return cls._from_data(data, ""), (None if base is None else cls._from_data(base, "baseline."))
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError, RecursionError) as e:
            raise ValueError(f"malformed trace JSON: {e}") from e

    @classmethod
    def _from_data(cls, data, where: str) -> Trace:
        if not isinstance(data, dict) or data.pop("schema", None) != SCHEMA:
            raise ValueError(f"not a specviz trace (expected {where}schema {SCHEMA!r})")
        check_trace(data, where)  # every field's kind, before anything is built
        cfg = data["config"] = DecodeConfig(**data["config"])
        data["rounds"] = [Round(**round_fields(r, f"{where}rounds[{i}].", cfg)) for i, r in enumerate(data["rounds"])]
        data["token_text"] = {int(k): v for k, v in data.get("token_text", {}).items()}
        data["token_bytes"] = {int(k): v for k, v in data.get("token_bytes", {}).items()}
        return cls(**data)


FRAME_COLUMNS = ["round", "k", "position", "token", "text", "status", "drafted", "p", "q", "ratio",
                 "accept_prob", "u", "beta", "node", "parent"]  # node, parent: a tree round's node ids


def target_passes(rounds) -> int:
    """The target forward passes the rounds made: one each, except a first round (index 0) that drafted
    nothing (an autoregressive run's, or a drafter with no proposal), which the prefill's last logits serve.
    Counted round by round, so the passes of several runs' rounds add up."""
    return sum(not (r.index == 0 and not r.drafted) for r in rounds)


def _row(text, r, i, token, status, drafted, p, q, accept_prob, u, beta, node=None, parent=None):
    ratio = p / q if q else None
    return [r.index, r.k, i, token, text, status, drafted, p, q, ratio, accept_prob, u, beta, node, parent]


def _plus(a, b):
    """a + b; tuples (per-position counts) elementwise, the shorter padded with zeros."""
    if not isinstance(a, tuple):
        return a + b
    n = max(len(a), len(b))
    return tuple(x + y for x, y in zip(a + (0,) * (n - len(a)), b + (0,) * (n - len(b))))


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0
