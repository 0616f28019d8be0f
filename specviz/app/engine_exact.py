"""The "Is it exact?" panel under Your engine: the conformance kit's report card (card.json) or its two sample
files (samples-on.jsonl, samples-off.jsonl) uploaded and read, the verdict with its power, the per-position tests,
the greedy divergences and the chart; and the negative control: the kit run here, at the card's N, setting and
length, against ``specviz.serve``'s table pair with a known-lossy accept rule (it must flag) and with Leviathan's
(it should pass). Nothing here reaches an engine: the statistics run on the files, the control in this process.
Every upload is held to the trace import's size limit, every refusal is a ValueError saying what to change."""
from __future__ import annotations

import json
import time
from pathlib import Path

import gradio as gr
import pandas as pd

from ..conformance import LlamaCpp, Setting, read_samples
from ..conformance import run as run_kit
from ..conformance.card import Card
from ..conformance.greedy import NEAR_TIE
from ..conformance.kit import analyse
from ..serve import Engine, table_pair
from ..trace import MAX_TRACE_BYTES
from ..views import engine_report as report
from ..views.conformance_plots import pvalue_figure
from .budget import Budget
from .engine_inputs import file_paths, read_upload, renamed, size_of
from .tempfiles import discard
from .widgets import LAB_QUEUE, bind, chart

MAX_TESTS = 1000  # rows a card may hold here (a kit run: prompts x settings x positions x 2 kinds)
MAX_TOKENS = 64  # tokens per sample, as the kit draws at most
MAX_CONTROL_N = 2000  # samples per mode the negative control draws at most
LOSSY = ("typical", "optimistic", "scalar_residual", "raw_q")  # served rules the kit must flag (docs/CONFORMANCE.md)
TEST_COLUMNS = {"prompt_id": str, "position": int, "kind": str, "n_on": int, "n_off": int, "categories": int,
                "tested": bool, "flagged": bool}
NUMBERS = ("pvalue", "p_holm", "tv", "detectable_tv")  # a number or null in each test row


# -- a card, uploaded or recomputed from samples --------------------------------------------------------------------
def card_from_json(data: bytes, name: str) -> dict:
    """An uploaded card.json as the kit wrote it, checked field by field and against itself (each row's flag is its
    Holm p-value under alpha; the verdict is a flag exactly when a row or a greedy divergence flags)."""
    try:
        card = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{name} is not a card.json (not JSON: {error})") from None
    keys = ("verdict", "info", "settings", "n", "alpha", "power", "tests", "greedy", "acceptance")
    missing = [k for k in keys if not isinstance(card, dict) or k not in card]
    if missing:
        raise ValueError(f"{name} is not a conformance card: it lacks {', '.join(missing)} (upload the card.json "
                         "that python -m specviz.conformance --out wrote)")
    if isinstance(card["n"], bool) or not isinstance(card["n"], int) or card["n"] < 1:
        raise ValueError(f"{name}: n (samples per mode) must be a whole number of at least 1, got {card['n']!r}")
    if not isinstance(card["tests"], list) or not 0 < len(card["tests"]) <= MAX_TESTS:
        raise ValueError(f"{name}: 'tests' must be a list of 1 to {MAX_TESTS:,} rows")
    alpha = card["alpha"]
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise ValueError(f"{name}: alpha must be a number in (0, 1), got {alpha!r}")
    for i, row in enumerate(card["tests"], 1):
        check_test_row(row, i, alpha, name)
    for key, kind in (("info", dict), ("acceptance", dict), ("settings", list), ("greedy", list), ("power", str)):
        if not isinstance(card[key], kind):
            raise ValueError(f"{name}: '{key}' must be a JSON {'object' if kind is dict else kind.__name__}")
    structural = any(isinstance(d, dict) and d.get("kind") == "structural" for d in card["greedy"])
    verdict = "flag" if any(r["flagged"] for r in card["tests"]) or structural else "pass"
    if card["verdict"] != verdict:
        raise ValueError(f"{name} says {card['verdict']!r} but its own rows say {verdict!r}: not a card as the kit "
                         "wrote it")
    return card


def check_test_row(row, i: int, alpha: float, name: str) -> None:
    if not isinstance(row, dict):
        raise ValueError(f"{name}: test row {i} is not a JSON object")
    for key, kind in TEST_COLUMNS.items():
        value = row.get(key)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{name}: test row {i} lacks {key} (a {kind.__name__}), got {value!r}")
    for key in NUMBERS:
        value = row.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"{name}: test row {i}'s {key} must be a number or null, got {value!r}")
    if not 1 <= row["position"] <= MAX_TOKENS:
        raise ValueError(f"{name}: test row {i}'s position must be 1 to {MAX_TOKENS}, got {row['position']}")
    p = row.get("p_holm")
    if row["flagged"] != bool(row["tested"] and p is not None and p < alpha):
        raise ValueError(f"{name}: test row {i} is marked flagged={row['flagged']} with Holm's p = {p} at alpha = "
                         f"{alpha:g}: not a card as the kit wrote it")


def card_from_samples(paths: list[str], names: dict[str, str]) -> dict:
    """The card of two sample files (one speculation on, one off, told by their lines' mode), the kit's own tests
    (``read_samples``: same settings, prompts, lengths and engine, at least 30 per group); no greedy check (that
    needs the engine)."""
    modes = {first_mode(path, names[path]): path for path in paths}
    if len(paths) != 2 or set(modes) != {"on", "off"}:
        raise ValueError("upload the two sample files the kit wrote, samples-on.jsonl and samples-off.jsonl (one "
                         f"file with speculation on, one off); got {', '.join(sorted(names.values())) or 'none'}")
    try:
        frame = read_samples(modes["on"], modes["off"])
        check_frame(frame)
        settings = [Setting(**s) for s in {json.dumps(s, sort_keys=True): s for s in frame.settings}.values()]
        tests = analyse(frame)
    except (TypeError, AttributeError) as error:
        raise ValueError(f"the samples' settings are not the kit's (temperature, top_k, top_p, min_p): {error}") from None
    except ValueError as error:
        raise renamed(error, names) from None
    first = frame.iloc[0]
    info = dict(engine=first.engine, version=first.version, model="(from the samples)")
    return Card.build(info, settings, frame, tests, [], 0.05, NEAR_TIE).to_json()


def first_mode(path: str, name: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        line = next((line for line in f if line.strip()), "")
    try:
        mode = json.loads(line).get("mode")
    except (json.JSONDecodeError, AttributeError):
        raise ValueError(f"{name}: its first line is not one of the kit's sample lines (JSON with a 'mode')") from None
    if mode not in ("on", "off"):
        raise ValueError(f"{name}: mode {mode!r} on its first line; the kit writes 'on' or 'off'")
    return mode


def check_frame(frame: pd.DataFrame) -> None:
    """What the tests would be sized by, checked before they run: tokens per sample and tests in all."""
    n_predict = pd.to_numeric(frame.n_predict, errors="coerce")
    if n_predict.isna().any() or not n_predict.between(2, MAX_TOKENS).all() or (n_predict % 1).any():
        raise ValueError(f"n_predict must be a whole number from 2 to {MAX_TOKENS} on every line")
    if frame.tokens.map(len).max() > MAX_TOKENS:
        raise ValueError(f"a sample holds more than {MAX_TOKENS} tokens; the kit draws at most {MAX_TOKENS}")
    groups = frame.groupby(["prompt_id", "setting"]).n_predict.first()
    if 2 * int(groups.sum()) > MAX_TESTS:
        raise ValueError(f"{len(groups)} prompt and setting groups of {int(groups.max())} tokens make more than "
                         f"{MAX_TESTS:,} tests: test fewer prompts or settings at a time")


def read_exact(card_file, sample_files) -> tuple[str, object, dict]:
    """(the card in words, its chart, what the negative control needs): from the card, or else from the samples."""
    paths = file_paths(card_file) + file_paths(sample_files)
    try:
        names = {path: Path(path).name for path in paths}
        for path in paths:
            if size_of(path) > MAX_TRACE_BYTES:
                raise ValueError(f"{names[path]} is {size_of(path) / 2**20:.1f} MiB; at most "
                                 f"{MAX_TRACE_BYTES / 2**20:.0f} MiB (the trace import's limit)")
        if file_paths(card_file):
            path = file_paths(card_file)[0]
            card, how = card_from_json(read_upload(path), names[path]), f"read from {names[path]}"
        elif file_paths(sample_files):
            card, how = card_from_samples(file_paths(sample_files), names), "recomputed here from the samples"
        else:
            raise ValueError("nothing to read: upload the kit's card.json, or its samples-on.jsonl and "
                             "samples-off.jsonl")
    finally:
        for path in paths:
            discard(path)
    tests = pd.DataFrame(card["tests"])
    return report.exact_markdown(card, how), pvalue_figure(tests, card["alpha"]), control_plan(card)


def control_plan(card: dict) -> dict:
    """What the negative control repeats: the card's N, length and its first sampled setting (the kit's default
    where it sampled none: a greedy setting cannot tell rules apart)."""
    sampled = [s for s in card["settings"] if isinstance(s, dict) and (s.get("temperature") or 0) > 0]
    try:
        setting = Setting(**sampled[0]) if sampled else Setting()
    except TypeError:
        setting = Setting()
    positions = [r["position"] for r in card["tests"]]
    return dict(n=card["n"], n_predict=max(positions),
                setting=setting.to_dict(), alpha=card["alpha"])


# -- the negative control --------------------------------------------------------------------------------------------
class Served(LlamaCpp):
    """The kit's llama.cpp client on ``specviz.serve``'s engine in this process: the request's JSON handed to the
    server's own handler (no socket, no outbound request), the budget checked before each."""

    def __init__(self, engine: Engine, budget: Budget, n_max: int = 4):
        def transport(url, body, timeout):
            budget.check()
            return json.loads(json.dumps(engine.completion(json.loads(json.dumps(body)))))

        super().__init__("http://in-process", n_max=n_max, transport=transport)
        self.engine = engine

    def info(self) -> dict:
        return dict(engine="specviz.serve (in this process)", version=self.engine.version, model="table pair",
                    rule=self.engine.rule)


def negative_control(plan: dict | None, rule: str = "typical", budget: Budget | None = None) -> dict:
    """The kit at the plan's N, length and setting against the table pair served with ``rule`` (lossy: the kit
    must flag it) and with Leviathan's (exact), refused up front when a pilot says it would overrun the budget."""
    if not plan or not plan.get("n"):
        raise ValueError("read a card (or samples) first: the negative control repeats its N, length and setting")
    if rule not in LOSSY:
        raise ValueError(f"the lossy rule must be one of {LOSSY}, got {rule!r}")
    budget = budget or Budget()
    n, n_predict, setting = min(plan["n"], MAX_CONTROL_N), max(2, plan["n_predict"]), Setting(**plan["setting"])
    pilot = Served(Engine(*table_pair(), rule=rule), budget)
    start = time.perf_counter()
    for seed in range(8):
        pilot.draw([1], setting, seed % 2 == 0, seed, n_predict, 1)
    per_draw = (time.perf_counter() - start) / 8
    budget.refuse_over(budget.elapsed + per_draw * 4 * n, f"the negative control at N = {n:,} per mode",
                       "read a card of smaller N, or run scripts/measure/conformance_repeats.py on your machine")
    cards = {name: run_kit(Served(Engine(*table_pair(), rule=name), budget), [[1]], [setting], n=n,
                           n_predict=n_predict, alpha=plan["alpha"], greedy_tokens=0).to_json()
             for name in (rule, "leviathan")}
    return dict(n=n, capped=n < plan["n"], n_predict=n_predict, setting=setting.label, cards=cards)


def run_control(plan, rule) -> str:
    return report.control_markdown(negative_control(plan, rule))


def handlers():
    return bind(None, plain=dict(read_exact=read_exact, exact_control=run_control))


def build() -> None:
    """The panel: uploads, the verdict and chart, the negative control."""
    h = handlers()
    with gr.Accordion("Is it exact? Read the conformance kit's card", open=False, elem_id="exact"):
        gr.Markdown("Run `python -m specviz.conformance --llamacpp URL --out card/` (or `--openai URL_ON URL_OFF`) "
                    "against your engine (docs/CONFORMANCE.md), then upload its `card.json`, or its two sample files "
                    "to have the tests recomputed here. Nothing here contacts your engine.")
        with gr.Row():
            card_file = gr.File(label="card.json", file_count="single", elem_id="exact-card")
            samples = gr.File(label="...or samples-on.jsonl and samples-off.jsonl", file_count="multiple",
                              elem_id="exact-samples")
        read_btn = gr.Button("Read the card", elem_id="exact-read")
        verdict = gr.Markdown(elem_id="exact-verdict")
        plot = chart("Speculation on against off, one bar per tested position: −log10 of Holm's p; a bar over the "
                     "dashed line is a flag.", elem_id="exact-plot")
        plan = gr.State(None)
        with gr.Row():
            rule = gr.Dropdown(list(LOSSY), value=LOSSY[0], label="Known-lossy rule served here")
            control_btn = gr.Button("Run the negative control at this N", elem_id="exact-control-run")
        control = gr.Markdown(elem_id="exact-control")
    read_btn.click(h.read_exact, [card_file, samples], [verdict, plot, plan], api_visibility="undocumented")
    control_btn.click(h.exact_control, [plan, rule], [control], api_visibility="undocumented", **LAB_QUEUE)
