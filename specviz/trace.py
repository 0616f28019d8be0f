"""What a generation run did, round by round: frozen records, a Trace, its table and its JSON.

Notation as in ``specviz.sampling``: p target, q draft, u uniform draw, beta = sum min(p, q).
In greedy runs u is None, p and q are the models' plain softmax probabilities (their confidence),
and beta is 1.0 where the draft's argmax equals the target's argmax, else 0.0.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

import pandas as pd

from .config import DecodeConfig

SCHEMA = "specviz.trace/1"


@dataclass(frozen=True)
class Round:
    """One draft -> verify -> accept -> commit round (autoregressive runs: k = 0, one target token)."""

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
    stop_reason: str = ""  # "eos", "length" or "" while running
    token_text: dict[int, str] = field(default_factory=dict)  # id -> text, for replay without a tokenizer

    @classmethod
    def start(cls, prompt_ids: list[int], config: DecodeConfig, target_name: str, draft_name: str | None,
              eos_token_ids: list[int]) -> "Trace":
        """The empty trace of a run about to start; draft_name None: an autoregressive run (nothing drafted)."""
        mode = "autoregressive" if draft_name is None else "speculative"
        return cls(prompt_ids=list(prompt_ids), config=config, mode=mode, target_name=target_name,
                   draft_name=draft_name or "", eos_token_ids=list(eos_token_ids))

    @property
    def new_tokens(self) -> list[int]:
        return [t for r in self.rounds for t in r.emitted]

    def summary(self) -> Summary:
        rs = self.rounds
        drafted = sum(len(r.drafted) for r in rs)
        accepted = sum(r.n_accepted for r in rs)
        betas = [b for r in rs for b in r.beta if b is not None]
        n_new = sum(len(r.emitted) for r in rs)
        depth = max((len(r.drafted) for r in rs), default=0)
        per_position = tuple(
            _ratio(sum(r.n_accepted > i for r in rs), sum(len(r.drafted) > i for r in rs)) for i in range(depth)
        )
        return Summary(
            rounds=len(rs), new_tokens=n_new, drafted=drafted, accepted=accepted,
            acceptance_rate=_ratio(accepted, drafted), alpha=_ratio(sum(betas), len(betas)),
            tau=_ratio(n_new, len(rs)), target_forwards_per_token=_ratio(target_passes(rs), n_new),
            tokens_per_s=_ratio(n_new, self.total_s), draft_s=sum(r.draft_s for r in rs),
            target_s=sum(r.target_s for r in rs), total_s=self.total_s, per_position=per_position,
        )

    def text(self, token: int) -> str:
        return self.token_text.get(token, f"<{token}>")

    def to_frame(self) -> pd.DataFrame:
        """One row per token the run produced or considered: every drafted token (status accepted,
        rejected or discarded; drafted=True) and every resampled or bonus token (drafted=False)."""
        rows = []
        for r in self.rounds:
            for i, x in enumerate(r.drafted):
                rows.append(_row(self, r, i, x, r.status(i), True, r.p[i], r.q[i], r.accept_prob[i], r.u[i], r.beta[i]))
            for status, tok in (("resampled", r.resampled), ("bonus", r.bonus)):
                if tok is not None:
                    rows.append(_row(self, r, r.n_accepted, tok, status, False, r.next_p, None, None, None, None))
        df = pd.DataFrame(rows, columns=FRAME_COLUMNS)
        return df.astype({"p": float, "q": float, "ratio": float, "accept_prob": float, "u": float, "beta": float})

    def to_json(self) -> str:
        data = asdict(self)
        data["schema"] = SCHEMA
        data["token_text"] = {str(k): v for k, v in self.token_text.items()}
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> "Trace":
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.pop("schema", None) != SCHEMA:
                raise ValueError(f"not a specviz trace (expected schema {SCHEMA!r})")
            data["config"] = DecodeConfig(**data["config"])
            data["rounds"] = [_round_from_dict(r) for r in data["rounds"]]
            data["token_text"] = {int(k): v for k, v in data.get("token_text", {}).items()}
            return cls(**data)
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as e:
            raise ValueError(f"malformed trace JSON: {e}") from e


FRAME_COLUMNS = ["round", "k", "position", "token", "text", "status", "drafted", "p", "q", "ratio",
                 "accept_prob", "u", "beta"]


def target_passes(rounds) -> int:
    """The target forward passes the rounds made: one each, except a first round that drafted nothing
    (an autoregressive run's, or a drafter with no proposal), which the prefill's last logits serve."""
    rounds = list(rounds)
    return len(rounds) - (1 if rounds and rounds[0].index == 0 and not rounds[0].drafted else 0)


def _row(trace, r, i, token, status, drafted, p, q, accept_prob, u, beta):
    ratio = p / q if q else None
    return [r.index, r.k, i, token, trace.text(token), status, drafted, p, q, ratio, accept_prob, u, beta]


def _round_from_dict(d: dict) -> Round:
    names = {f.name for f in fields(Round)}
    if set(d) != names:
        raise ValueError(f"round fields differ: missing {sorted(names - set(d))}, unexpected {sorted(set(d) - names)}")
    d = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
    d["residual_top"] = tuple(tuple(t) for t in d["residual_top"])
    return Round(**d)


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0
