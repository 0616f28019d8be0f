"""Write the tables of assets/models/README.md from the training logs and family_eval.json.

    python scripts/measure/measure_family.py && python scripts/train/model_card.py   # prints markdown to paste
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets" / "models"


def training_table() -> str:
    rows = ["| model | parameters | objective | steps | tokens seen | wall time | final train loss | validation |",
            "|---|---|---|---|---|---|---|---|"]
    for name in ("target", "lite", "lite-bpe2k", "small-ce"):
        path = ASSETS / name / "train_log.json"
        if not path.is_file():
            continue
        log = json.loads(path.read_text())
        distilled = "objective" in log
        objective = "forward KL to target" if distilled else "next-token cross-entropy"
        loss = log.get("final_kl_loss") if distilled else log.get("final_train_loss")
        valid = (f"KL {log['valid_kl_before']:.3f} -> {log['valid_kl_after']:.3f}" if distilled
                 else f"ppl {log['valid_ppl']:.1f}")
        minutes = log.get("wall_seconds", 0) / 60
        rows.append(f"| {name} | {log['parameters']:,} | {objective} | {log['steps']} | {log.get('tokens_seen', 0):,} | "
                    f"{minutes:.1f} min | {loss:.3f} | {valid} |")
    return "\n".join(rows)


def eval_tables() -> str:
    path = ASSETS / "family_eval.json"
    if not path.is_file():
        return "(run scripts/measure/measure_family.py)"
    ev = json.loads(path.read_text())
    at4 = {(r["draft"], r["temperature"]): r for r in ev["sweep"] if r["k"] == 4}
    temps = sorted({t for _, t in at4})
    head = " | ".join(f"acceptance, alpha, tau (T = {t:g})" for t in temps)
    out = [f"| draft | {head} |", "|---|" + "---|" * len(temps)]
    for d in dict.fromkeys(d for d, _ in at4):
        cells = " | ".join(f"{at4[d, t]['acceptance_rate']:.3f}, {at4[d, t]['alpha']:.3f}, {at4[d, t]['tau']:.2f}"
                           for t in temps)
        out.append(f"| {d} | {cells} |")
    out += ["", "| draft | T | best k | acceptance | tau | c | v | speedup measured | speedup predicted |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in ev["best"]:
        out.append(f"| {r['draft']} | {r['temperature']:g} | {r['k']} | {r['acceptance_rate']:.3f} | {r['tau']:.2f} | "
                   f"{r['c']:.3f} | {r['v']:.2f} | {r['speedup']:.2f}x | {r['speedup_theory']:.2f}x |")
    out.append(f"\nMeasured by `{ev['command']}` ({ev['seconds']:.0f} s, {ev['threads']} threads, "
               f"{len(ev['prompts'])} prompts x {ev['max_new_tokens']} tokens, the baseline interleaved).")
    return "\n".join(out)


if __name__ == "__main__":
    sys.stdout.write(training_table() + "\n\n" + eval_tables() + "\n")
