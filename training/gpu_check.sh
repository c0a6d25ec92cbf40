#!/usr/bin/env bash
# GPU check: CPT then SFT of a Qwen3 at a real size (random init, ~0.47B parameters with a
# 32k vocabulary, bf16) for a fixed number of steps on a release generated here, then the
# fidelity eval. Prints tokens/s, model FLOPs utilisation (MFU), peak GPU memory and the
# eval table. Budget: under 8 minutes on one H100/H200-class GPU.
#
#   bash training/gpu_check.sh                 # the real check (needs CUDA)
#   SIZE=tiny STEPS=4 bash training/gpu_check.sh   # the same plumbing on a CPU, in about 2 minutes
#
# Knobs: PY (python with trajforge[train]; default .venv/bin/python, else python3), WORK
# (scratch folder), TRANSITIONS (synthetic transitions, default 20000), STEPS (per stage),
# PEAK_TFLOPS (the GPU's dense bf16 peak; default 989, H100/H200 SXM).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
WORK=${WORK:-/tmp/trajforge-gpu-check}
SIZE=${SIZE:-0.5b}
TRANSITIONS=${TRANSITIONS:-20000}
STEPS=${STEPS:-60}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}
T0=$(date +%s)

if [ "$SIZE" = tiny ]; then
  INIT='{hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 8}'
  VOCAB=2048 LEN=1024 BATCH=2 EVAL_TOKENS=16
else  # Qwen3-0.6B's shape: 28 layers, hidden 1024, 16 query / 8 key-value heads of 128
  INIT='{hidden_size: 1024, intermediate_size: 3072, num_hidden_layers: 28, num_attention_heads: 16, num_key_value_heads: 8, head_dim: 128, tie_word_embeddings: true}'
  VOCAB=32768 LEN=4096 BATCH=8 EVAL_TOKENS=256
fi
[ "$SIZE" = tiny ] || "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "gpu_check: no CUDA GPU visible to torch (SIZE=tiny runs the plumbing on a CPU)")'

rm -rf "$WORK" && mkdir -p "$WORK"
STORE="$WORK/store"
echo "== data: $TRANSITIONS synthetic transitions -> curation -> ${VOCAB}-token BPE -> release"
"$PY" -m trajforge synth "$STORE" -n "$TRANSITIONS" --seed 7 --duplicates 0.05 >/dev/null
"$PY" -m trajforge curate examples/curation/default.yaml --store "$STORE" >/dev/null 2>"$WORK/curate.log"
"$PY" -m trajforge tokenizer train --store "$STORE" --out "$STORE/tokenizer.json" --vocab-size "$VOCAB" >/dev/null
sed -e "s/context_tokens: 4096/context_tokens: $LEN/" -e "s/max_prompt_tokens: 4096/max_prompt_tokens: $((LEN / 2))/" \
  examples/mixtures/default.yaml > "$WORK/mixture.yaml"
"$PY" -m trajforge release create "$WORK/mixture.yaml" --store "$STORE" --name gpu --version 1 2>"$WORK/release.log" | sed 's/^/   /'
echo "   data ready after $(( $(date +%s) - T0 )) s"

cat > "$WORK/cpt.yaml" <<EOF
stage: cpt
model: {init: $INIT}
release: gpu/1
store: $STORE
output: $WORK/cpt
max_length: $LEN
train: {max_steps: $STEPS, learning_rate: 3.0e-4, warmup_ratio: 0.1, per_device_batch_size: $BATCH, save_steps: $STEPS, logging_steps: $(( STEPS / 4 > 0 ? STEPS / 4 : 1 ))}
EOF
sed -e 's/^stage: cpt/stage: sft/' -e "s#^model: .*#model: {path: $WORK/cpt}#" -e "s#output: $WORK/cpt#output: $WORK/sft#" \
  -e 's/learning_rate: 3.0e-4/learning_rate: 1.0e-4/' -e "s/^max_length: .*/max_length: $((LEN * 2))/" \
  -e "s/per_device_batch_size: $BATCH/per_device_batch_size: $((BATCH / 2 > 0 ? BATCH / 2 : 1))/" "$WORK/cpt.yaml" > "$WORK/sft.yaml"

for stage in cpt sft; do
  echo "== $stage: $STEPS steps"
  "$PY" -m trajforge train "$stage" "$WORK/$stage.yaml" 2>"$WORK/$stage.log" | sed 's/^/   /'
done

"$PY" - "$WORK" "$PEAK_TFLOPS" <<'EOF'
import json, sys
from pathlib import Path
work, peak = Path(sys.argv[1]), float(sys.argv[2]) * 1e12
print("\n| stage | parameters | steps | tokens | tokens/s | MFU | peak GPU memory |")
print("|---|---|---|---|---|---|---|")
for stage in ("cpt", "sft"):
    r = json.loads((work / stage / "training_report.json").read_text())
    cfg = json.loads((work / stage / "config.json").read_text())
    layers, hidden, seq = cfg["num_hidden_layers"], cfg["num_attention_heads"] * cfg["head_dim"], r["config"]["max_length"]
    # training FLOPs per token: 6 x parameters (forward + backward) + causal attention 6 x layers x seq x hidden
    flops_token = 6 * r["parameters"] + 6 * layers * seq * hidden
    mfu = r["tokens_per_s"] * flops_token / peak
    mem = f"{r['peak_gpu_mb'] / 1024:.1f} GiB" if r["peak_gpu_mb"] else "- (CPU)"
    print(f"| {stage} | {r['parameters'] / 1e6:,.1f} M | {r['steps']} | {r['train_tokens']:,} | {r['tokens_per_s']:,.0f} "
          f"| {mfu:.1%} | {mem} |")
EOF

echo "== eval (test split)"
"$PY" -m trajforge train eval --model "$WORK/sft" --store "$STORE" --release gpu/1 --max-samples 16 \
  --max-new-tokens "$EVAL_TOKENS" --rollout-steps 3 --rollouts 4 --out "$WORK/eval.json" 2>"$WORK/eval.log"
echo "gpu_check: done in $(( $(date +%s) - T0 )) s"
