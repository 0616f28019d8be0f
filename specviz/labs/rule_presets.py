"""Which accept rule engines use by default, with which drafter, as read in their source (the file and function cited
beside each), as a specviz rule variant (``labs.rules.VARIANTS``) the rule lab can replay. Where the source read
does not settle a case, ``settled`` is False and ``note`` says what is open. Sources were read in the snapshots of
each repository this project's search index holds (late 2025 to 2026); engines change, so re-read before quoting.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd


@dataclass(frozen=True)
class EnginePreset:
    engine: str
    drafter: str
    variant: str  # a labs.rules VARIANTS name: rule, or rule+argmax (the draft takes its argmax)
    source: str  # repository path and function
    note: str
    settled: bool = True


PRESETS = (
    EnginePreset("vLLM (v1 gpu_model_runner)", "n-gram, EAGLE, MTP, draft model", "point_mass",
                 "vllm/v1/worker/gpu_model_runner.py: self.rejection_sampler(spec_decode_metadata, None  # draft_probs "
                 "...); vllm/v1/sample/rejection_sampler.py rejection_random_sample_kernel (IS_NGRAM: draft_prob = 1) "
                 "and sample_recovered_tokens_kernel (p with the draft token zeroed)",
                 "draft_probs is None for every proposer, so q is a point mass at the drafted token: accept with p(x), "
                 "recover from p without x. Lossless; its acceptance is E_q[p(x)], not sum min(p, q)."),
    EnginePreset("vLLM (gpu/ model runner, SpeculativeConfig)", "EAGLE, MTP, draft model", "leviathan+argmax",
                 "vllm/config/speculative.py SpeculativeConfig.draft_sample_method = 'greedy' ('the draft "
                 "probabilities are treated as one-hot during rejection sampling'); 'probabilistic' passes the draft "
                 "logits (vllm/v1/worker/gpu/spec_decode/rejection_sampler.py RejectionSampler._verify)",
                 "Default: argmax drafts, q one-hot (the same law as point_mass with argmax drafting). "
                 "draft_sample_method='probabilistic' is Leviathan's rule ('leviathan'). rejection_sample_method "
                 "'synthetic' fakes acceptance for benchmarks (lossy, not modelled here)."),
    EnginePreset("SGLang", "EAGLE / EAGLE-3 trees", "point_mass",
                 "sgl-kernel/csrc/speculative/speculative_sampling.cuh TreeSpeculativeSamplingTargetOnly: accept if "
                 "coin <= prob_acc / threshold_acc or p(x) >= threshold_single; resample from relu(p - draft_probs) "
                 "with rejected tokens' p copied into draft_probs",
                 "'Target only': drafts are point masses (the topk children of EAGLE's tree), one coin per level "
                 "against the cumulative p of the siblings tried. With both thresholds at 1 (the defaults) lossless; "
                 "--speculative-accept-threshold-acc < 1 is the 'lenient' rule with a point-mass q (lossy). Newer "
                 "SGLang drafts with a real q for some algorithms (spec_utils.py); not settled here which are default.",
                 settled=False),
    EnginePreset("llama.cpp (common, server)", "draft model, n-gram, EAGLE-3, MTP", "exact_match+argmax",
                 "common/speculative.cpp draft: id = cur_p->data[0].id (the draft's top token); common/sampling.cpp "
                 "common_sampler_sample_and_accept_n: the target's sampler draws each position and drafts are kept "
                 "while draft[i] == id; tools/server calls the same function",
                 "Exact match of the target's own sampled token against argmax drafts: lossless, acceptance "
                 "p(argmax q), which falls as T flattens p."),
    EnginePreset("MLX-LM", "draft model", "exact_match",
                 "mlx_lm/generate.py speculative_generate_step: _draft_generate samples the draft with the same "
                 "sampler; the target's tokens from _step are compared, `if tn != dtn: break`",
                 "The draft samples with the run's sampler (argmax when temperature is 0), the target samples its "
                 "own token, equal tokens are kept: lossless, acceptance sum_v q(v) p(v)."),
    EnginePreset("transformers (assisted generation)", "assistant model with logits", "leviathan",
                 "transformers generation/utils.py GenerationMixin._assisted_decoding: `if do_sample and "
                 "candidate_logits is not None: _speculative_sampling(...)` (Algorithm 1)",
                 "Leviathan's rule with the assistant's processed q. Whether the assistant samples or takes its "
                 "argmax follows the assistant's generation config (candidate_generator.py), not settled here.",
                 settled=False),
    EnginePreset("transformers (prompt lookup, assistants without logits)", "prompt lookup / n-gram", "exact_match",
                 "transformers generation/utils.py _assisted_decoding, Case 2: selected_tokens = "
                 "torch.multinomial(probs...) when sampling, n_matches counted until the first mismatch",
                 "The target samples its tokens and keeps drafts while equal: lossless."),
    EnginePreset("TensorRT-LLM (C++ runtime, draft-target)", "draft model", "exact_match",
                 "cpp/tensorrt_llm/kernels/speculativeDecoding/common.cu (decodingKernels.cu in older trees) "
                 "acceptDraftTokensByIds; acceptDraftTokensByLogitsKernel rejects a position if targetProb < "
                 "threshold * draftProb at ANY vocabulary entry (its FIXME says so), threshold uniform or the "
                 "constant draftAcceptanceThreshold",
                 "Two paths: by ids (exact match against the target's tokens) and by logits (a whole-distribution "
                 "comparison, not Leviathan's per-token test; not modelled here). Which one a deployment uses depends "
                 "on its config; the PyTorch backend (tensorrt_llm/_torch/speculative, sample_and_accept_draft_tokens) "
                 "compares argmax tokens ('strict acceptance') and has an opt-in relaxed acceptance for MTP thinking "
                 "phases (lossy).", settled=False),
    EnginePreset("Medusa", "Medusa heads (top-k tree)", "typical",
                 "FasterDecoding/Medusa medusa/model/utils.py evaluate_posterior (typical: candidates_prob > "
                 "min(posterior_threshold, exp(-entropy) * posterior_alpha)); generate_candidates takes the target's "
                 "argmax for the next token when fast=True (medusa_generate's default)",
                 "Typical acceptance, epsilon = posterior_threshold = 0.09 and delta = posterior_alpha = 0.3 in "
                 "medusa_generate: lossy; temperature 0 is the greedy match."),
)


def presets_frame() -> pd.DataFrame:
    """The presets as a table: one row per engine and drafter."""
    return pd.DataFrame([asdict(p) for p in PRESETS])
