"""The labs' tabs: k sweep, losslessness, distillation. ``build_lab_tabs(store)`` lays them out inside
``ui.build_demo``'s Blocks; their handlers are in lab_handlers.py."""
from __future__ import annotations

import gradio as gr

from .config import EXAMPLE_PROMPTS
from .handlers import ModelStore
from .lab_handlers import FRESH, make_lab_handlers
from .ui import MODEL_QUEUE, _chart


# -- layout --------------------------------------------------------------------------------------------
def _sampling_controls(temperature: float = 1.0) -> list:
    with gr.Row():
        t = gr.Slider(0, 2, value=temperature, step=0.05, label="Temperature (0 = greedy)")
        top_k = gr.Number(value=0, precision=0, minimum=0, label="top-k (0 = off)")
        top_p = gr.Slider(0.05, 1, value=1.0, step=0.05, label="top-p (1 = off)")
    return [t, top_k, top_p]


def _sweep_tab(store: ModelStore, h) -> None:
    gr.Markdown("Run every k on the same prompts beside the autoregressive baseline; theory (dashed) uses the α and "
                "c measured in this run. ★ best k measured, ◆ best k predicted.")
    with gr.Row():
        target = gr.Dropdown(store.list_targets(), value=store.default_target(), label="Target")
        drafts = gr.Dropdown(store.list_drafters(), value=[store.default_draft()], multiselect=True, label="Drafts")
    prompts = gr.Textbox("\n\n".join(EXAMPLE_PROMPTS), lines=6, label="Prompts (separate with an empty line)")
    with gr.Row():
        k_min = gr.Number(1, precision=0, label="smallest k")
        k_max = gr.Number(8, precision=0, label="largest k")
        max_new = gr.Number(64, precision=0, label="new tokens per run")
        seed = gr.Number(0, precision=0, label="seed")
    sampling = _sampling_controls(0.0)
    with gr.Row():
        compare = gr.Checkbox(True, label="Then compare fixed k with the adaptive policies (history, heuristic, "
                                          "confidence stop)")
        fixed_k = gr.Number(4, precision=0, label="fixed k for the comparison")
        stop = gr.Number(0.4, label="confidence stop: draft up to 10, stop below this q(x) (0 = leave out)")
    with gr.Row():
        est_btn = gr.Button("Estimate time")
        run_btn = gr.Button("Run sweep", variant="primary")
    status = gr.Markdown("*Press Estimate time, or Run sweep (it says its estimate first).*")
    table = gr.Dataframe(label="Per (draft, k)", interactive=False)
    with gr.Row():
        acc, tau = _chart("Acceptance rate and α."), _chart("τ: tokens per round, measured against eq. 1.")
    with gr.Row():
        speed = _chart("Speedup: measured against Leviathan's prediction.")
        heat = _chart("Each later position needs every earlier draft accepted.")
    policy_table = gr.Dataframe(label="k policies", interactive=False)
    with gr.Row():
        bars, ks = _chart("tokens/s and acceptance per policy."), _chart("The drafts each round made.")
    files = gr.File(label="Results (CSV)", file_count="multiple", interactive=False)
    inputs = [target, drafts, prompts, k_min, k_max, *sampling, max_new, seed]
    est_btn.click(h.estimate, inputs, [status], api_visibility="undocumented", **MODEL_QUEUE)
    run_btn.click(h.run_sweep, inputs + [compare, fixed_k, stop], [status, table, acc, tau, speed, heat, policy_table, bars,
                                                            ks, files], api_visibility="undocumented", **MODEL_QUEUE)


def _lossless_tab(store: ModelStore, h) -> None:
    gr.Markdown("One context, thousands of verify steps at once: the emitted token must follow **p** exactly. "
                "The two WRONG variants are the classic bugs: a residual built from the scalar q(x), and q taken "
                "from unprocessed logits while the draft samples from processed ones.")
    with gr.Row():
        target = gr.Dropdown(store.list_targets(), value=store.default_target(), label="Target")
        draft = gr.Dropdown(store.list_drafters(), value=store.default_draft(), label="Draft")
    prompt = gr.Textbox(EXAMPLE_PROMPTS[0], lines=2, label="Context")
    with gr.Row():
        extra = gr.Number(0, precision=0, label="then generate this many tokens with the target")
        seed = gr.Number(0, precision=0, label="seed")
        draws = gr.Number(5000, precision=0, label="draws")
        batch = gr.Number(500, precision=0, label="draws per update")
    sampling = _sampling_controls(0.7)
    run_btn = gr.Button("Draw", variant="primary")
    status = gr.Markdown()
    table = gr.Dataframe(label="Goodness of fit against p", interactive=False)
    with gr.Row():
        right, decomp = _chart("Correct: the bars follow p."), _chart("min(p, q) + (1 − β)·residual = p, token by token.")
    with gr.Row():
        wrong_a, wrong_b = _chart("WRONG residual max(0, p − q(x))."), _chart("WRONG q from the raw logits.")
    run_btn.click(h.run_lossless, [target, draft, prompt, extra, *sampling, seed, draws, batch],
                  [status, table, right, wrong_a, wrong_b, decomp], api_visibility="undocumented", **MODEL_QUEUE)


def _distill_tab(store: ModelStore, h, mine: gr.State):
    """The tab; ``mine`` is this user's trained drafts (name -> TrainedDraft). Returns the Train event."""
    gr.Markdown("Distil a draft towards the target (forward KL) for a short budget and watch its acceptance rate "
                "climb as the held-out KL falls; beside it, an identical draft trained on the same batches with "
                "plain cross-entropy. Acceptance α (mean β) is measured on the example prompts (k = 4, T = 1, 16 tokens); "
                "checkpoints are not counted in the budget.")
    with gr.Row():
        target = gr.Dropdown(store.list_targets(), value=store.default_target(), label="Target")
        start = gr.Dropdown([FRESH] + store.list_drafters(), value=FRESH, label="Start from")
        seconds = gr.Number(20, label="training budget per method (s)")
        every = gr.Number(10, label="checkpoint every (s of training)")
        compare = gr.Checkbox(True, label="also train with cross-entropy")
    run_btn = gr.Button("Train", variant="primary")
    status = gr.Markdown()
    with gr.Row():
        loss, checks = _chart("Training loss per step."), _chart("Acceptance (solid) and held-out KL (dotted).")
    zipped = gr.File(label="Trained drafts (save_pretrained, zipped)", interactive=False)
    gr.Markdown("### Try a trained draft")
    with gr.Row():
        pick = gr.Dropdown([], label="Your trained drafts")
        prompt = gr.Textbox(EXAMPLE_PROMPTS[1], label="Prompt")
        temperature = gr.Slider(0, 2, value=0.8, step=0.05, label="Temperature")
    try_btn = gr.Button("Decode with it")
    timeline, summary = gr.HTML(), gr.Markdown()
    trained = run_btn.click(h.run_distill, [target, start, seconds, compare, every, mine],
                  [status, loss, checks, mine, zipped, pick], api_visibility="undocumented", **MODEL_QUEUE)
    try_btn.click(h.try_draft, [prompt, target, pick, mine, temperature], [timeline, summary],
                  api_visibility="undocumented", **MODEL_QUEUE)
    return trained


def build_lab_tabs(store: ModelStore, user_drafts: gr.State | None = None):
    """The three lab tabs, inside the caller's gr.Blocks. Drafts trained in the distillation lab go into
    ``user_drafts`` (a gr.State dict, per user; a fresh one if None). Returns the Train event (chain
    ``.then`` on it to refresh other draft pickers)."""
    h = make_lab_handlers(store)
    user_drafts = gr.State({}) if user_drafts is None else user_drafts
    with gr.Tabs():
        with gr.Tab("k sweep lab"):
            _sweep_tab(store, h)
        with gr.Tab("Losslessness lab"):
            _lossless_tab(store, h)
        with gr.Tab("Distillation lab"):
            trained = _distill_tab(store, h, user_drafts)
    return trained
