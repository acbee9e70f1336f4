#!/usr/bin/env bash
# RubiCap end to end on a GPU server: teacher committee -> rubric synthesis -> GRPO -> arena.
#
# Every line is a real vlrl command; each step is resumable and writes only into its own folder.
# Teachers, writer and judge are OpenAI-compatible servers (vLLM, or a hosted API whose key is read
# from OPENAI_API_KEY, never from the spec). See train/recipes/rubicap_7b.yaml for the GPU layout.
set -euo pipefail

IMAGES=${IMAGES:-data/images}
STUDENT=${STUDENT:-hf:Qwen/Qwen2.5-VL-7B-Instruct}
WRITER=${WRITER:-openai:http://127.0.0.1:8003/v1@Qwen/Qwen2.5-VL-72B-Instruct}
JUDGE=${JUDGE:-openai:http://127.0.0.1:8002/v1@Qwen/Qwen2.5-7B-Instruct}
ARENA_JUDGE=${ARENA_JUDGE:-openai:http://127.0.0.1:8003/v1@Qwen/Qwen2.5-VL-72B-Instruct}
RUN=${RUN:-runs/rubicap_7b}
NPROC=${NPROC:-5}

# 1. Teacher committee: every teacher captions every image.
vlrl data teacher-captions --images "$IMAGES" --out data/rubicap/teachers \
    --teacher qwen72b=openai:http://127.0.0.1:8003/v1@Qwen/Qwen2.5-VL-72B-Instruct \
    --teacher gemma27b=openai:http://127.0.0.1:8004/v1@google/gemma-3-27b-it \
    --teacher qwen3vl30b=openai:http://127.0.0.1:8005/v1@Qwen/Qwen3-VL-30B-A3B-Instruct

# 2. Rubric synthesis: consensus facts (>= 2 teachers), the student's deficiencies, weighted rubrics.
#    The writer is a served VLM, so it is shown the image (--with-image), as in the paper.
vlrl data rubrics --teachers data/rubicap/teachers --student "$STUDENT" --writer "$WRITER" --with-image \
    --out data/rubicap

# 2b. The in-loop judge must fail the student and pass the teachers on these rubrics (exits 1 if it
#     cannot tell them apart); --drop also writes the set without rubrics that do not discriminate.
vlrl reward smoke --reward rubicap_rubric --rubrics data/rubicap/rubrics.jsonl --judge "$JUDGE" --drop \
    --out data/rubicap/smoke.json

# 3. GRPO with the rubric reward judged by a light LLM.
WORLD_SIZE=$NPROC vlrl train check --recipe train/recipes/rubicap_7b.yaml output_dir="$RUN"
accelerate launch --config_file train/accelerate/deepspeed_zero3.yaml --num_processes "$NPROC" \
    train/grpo.py --recipe train/recipes/rubicap_7b.yaml output_dir="$RUN"

# 4. Arena against the base model, judged in both orders.
vlrl eval arena --candidate "rubicap=hf:$RUN" --baseline "base=$STUDENT" --judge "$ARENA_JUDGE" \
    --images data/heldout_images --out "$RUN-arena"
