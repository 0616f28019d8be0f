"""A small hand-built trace with hostile token texts: what the view tests render."""
from specviz.config import DecodeConfig
from specviz.trace import Round, Trace

EVIL = "<script>alert(1)</script>"
QUOTE = '"onmouseover=alert(2)'
TEXT = {1: "ROMEO", 2: ":", 3: EVIL, 4: QUOTE, 5: "\n", 6: " thou", 7: " art", 8: "<b>x</b>", 9: " love"}


def sample_trace(greedy=False):
    # round 0: drafts 3, 4, 5; 3 accepted, 4 rejected (u = 0.9 >= 0.2), 5 discarded; 6 resampled
    r0 = Round(index=0, k=3, drafted=(3, 4, 5), q=(0.5, 0.8, 0.3), p=(0.6, 0.16, 0.1), accept_prob=(1.0, 0.2, 1 / 3),
               u=(0.41, 0.9, None), beta=(0.7, 0.35, None), n_accepted=1, emitted=(3, 6), resampled=6, bonus=None,
               next_p=0.25, residual_top=((6, 0.5, 0.25, 0.05), (8, 0.3, 0.2, 0.1)), draft_s=0.01, target_s=0.05,
               wall_s=0.07)
    # round 1: both drafts accepted (u = 0.1 < 0.73), bonus 9
    r1 = Round(index=1, k=2, drafted=(7, 5), q=(0.4, 0.5), p=(0.292, 0.9), accept_prob=(0.73, 1.0), u=(0.1, 0.5), beta=(0.6, 0.8),
               n_accepted=2, emitted=(7, 5, 9), resampled=None, bonus=9, next_p=0.4, residual_top=(),
               draft_s=0.01, target_s=0.05, wall_s=0.07)
    cfg = DecodeConfig(k=3, temperature=0.0 if greedy else 1.0)
    return Trace([1, 2, 8], cfg, rounds=[r0, r1], token_text=dict(TEXT), stop_reason="length", total_s=0.2)
