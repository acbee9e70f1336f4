#!/usr/bin/env bash
# Vision-R1 end to end on a GPU server: modality-bridging cold start -> SFT -> PTST -> evaluate.
#
# Every line is a real vlrl command; each step is resumable and writes only into its own folder.
# The VLM and the text reasoner are OpenAI-compatible servers (vLLM); see
# train/recipes/vision_r1_7b_sft.yaml and vision_r1_7b_ptst.yaml for the GPU layouts.
set -euo pipefail

SAMPLES=${SAMPLES:-data/vision_r1/samples.jsonl}     # image, question, answer (optional choices)
VLM=${VLM:-openai:http://127.0.0.1:8000/v1@Qwen/Qwen2.5-VL-72B-Instruct}
REASONER=${REASONER:-openai:http://127.0.0.1:8001/v1@deepseek-ai/DeepSeek-R1}
BENCH=${BENCH:-data/mathvista/testmini.jsonl}
RUN=${RUN:-runs/vision_r1_7b}
NPROC=${NPROC:-8}

# 1. Cold start: pseudo-CoT and description from the VLM, the reasoner solves from the text; keep correct ones.
vlrl data cold-start --input "$SAMPLES" --vlm "$VLM" --reasoner "$REASONER" --out data/vision_r1/cold_start

# 2. SFT on the kept samples (Vision-R1-CI).
WORLD_SIZE=$NPROC vlrl train check --recipe train/recipes/vision_r1_7b_sft.yaml output_dir="$RUN-sft"
accelerate launch --config_file train/accelerate/deepspeed_zero3.yaml --num_processes "$NPROC" \
    train/sft.py --recipe train/recipes/vision_r1_7b_sft.yaml output_dir="$RUN-sft"

# 3. PTST: GRPO stages 4K/16 -> 8K/8 (-> 16K/4) with the hard format+answer reward.
WORLD_SIZE=$NPROC vlrl train check --recipe train/recipes/vision_r1_7b_ptst.yaml model.path="$RUN-sft" output_dir="$RUN"
accelerate launch --config_file train/accelerate/deepspeed_zero3.yaml --num_processes "$NPROC" \
    train/ptst.py --recipe train/recipes/vision_r1_7b_ptst.yaml model.path="$RUN-sft" output_dir="$RUN"

# 4. Reasoning evaluation (accuracy, format failures, lengths).
vlrl eval reasoning --model "hf:$RUN" --bench "$BENCH" --out "$RUN-eval"
