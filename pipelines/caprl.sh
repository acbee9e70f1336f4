#!/usr/bin/env bash
# CapRL end to end on a GPU server: curate QA -> check the reward -> GRPO -> evaluate.
#
# Every line is a real vlrl command; run them one at a time the first time. Each step is resumable
# (rerun the same line after a crash) and writes only into its own output folder.
# Models are served by vLLM as OpenAI-compatible endpoints (see train/recipes/caprl_3b.yaml for the
# GPU layout); set the variables below to your servers and data.
set -euo pipefail

IMAGES=${IMAGES:-data/images}                        # folder, manifest, parquet or save_to_disk folder
QA_VLM=${QA_VLM:-openai:http://127.0.0.1:8000/v1@Qwen/Qwen2.5-VL-72B-Instruct}   # writes the MCQs
ANSWERER=${ANSWERER:-openai:http://127.0.0.1:8001/v1@Qwen/Qwen2.5-3B-Instruct}    # text-only answerer
BENCH=${BENCH:-data/prism/chartqa.jsonl}             # Prism-style benchmark (docs/prism.md)
RUN=${RUN:-runs/caprl_3b}
NPROC=${NPROC:-4}

# 1. QA curation: the VLM writes MCQs per image; keep those that need the image.
vlrl data qa-curate --images "$IMAGES" --vlm "$QA_VLM" --answerer "$ANSWERER" --out data/caprl_qa

# 2. Is the reward sane? Real captions must beat generic, empty and shuffled ones.
vlrl reward smoke --qa data/caprl_qa/dataset --captioner hf:Qwen/Qwen2.5-VL-3B-Instruct \
    --answerer "$ANSWERER" --out "$RUN-smoke.json"

# 3. GRPO with the QA-utility reward (validate the recipe first: no model loads).
WORLD_SIZE=$NPROC vlrl train check --recipe train/recipes/caprl_3b.yaml output_dir="$RUN"
accelerate launch --config_file train/accelerate/deepspeed_zero2.yaml --num_processes "$NPROC" \
    train/grpo.py --recipe train/recipes/caprl_3b.yaml output_dir="$RUN"

# 4. Prism-style evaluation: the trained captioner describes, the text-only answerer answers.
vlrl eval prism --captioner "hf:$RUN" --answerer "$ANSWERER" --bench "$BENCH" --out "$RUN-prism"
vlrl eval caption-qa --qa data/caprl_qa/dataset --captioner "hf:$RUN" --answerer "$ANSWERER" --out "$RUN-caption-qa"
