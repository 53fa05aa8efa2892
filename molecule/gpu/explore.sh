#!/bin/bash
# Speed variants of the rank on one GPU machine, back to back in one device call, to choose the kernel defaults
# (docs/benchmarks/gpu-<date>.md records what they gave):
#   molecule/gpu/explore.sh OUTDIR [VARIANT...]          (expects .whl/ as docs/gpu-validation.md builds it)
# No train.yml: on a machine not provisioned the rank's packages go from the wheels into /tmp/site beside the
# image's torch, and each variant is `python -m train.rank.pretrain` as the launcher starts it on one GPU (the argv and DeepSpeed
# config that train.controller.resolve / dsconfig make for the job, ZeRO-0 with torch_autocast), plus the
# variant's flags. Data: full-size tokenizers (prepare_data's, padded to 30,522 / 50,257 entries as make bench
# does) over the built-in corpus repeated 16 times. Each variant prints one line from its perf.json (the steady
# rate between the end of step max_steps/4 and the last step) and metrics.json (first and last loss).
# DSC_EXPLORE_DEADLINE (Unix seconds; default: start + 540): a variant starts only when its expected time fits
# before it, and is stopped there. On a machine make bench provisioned, the node venv's packages are used and only
# the missing ones (liger_kernel, torchao) go to /tmp/site. OUT gets explore.log, results.txt and logs.tar.gz.
set -u -o pipefail
OUT=${1:-/tmp/explore}; [ $# -gt 0 ] && shift
mkdir -p "$OUT" /tmp/explore-logs
exec > >(tee -a "$OUT/explore.log") 2>&1
T0=$(date +%s)
DEADLINE=${DSC_EXPLORE_DEADLINE:-$(( T0 + 540 ))}
W=$PWD/.whl
L=/tmp/explore-logs
step() { echo; echo "=== $(( $(date +%s) - T0 )) s $*"; }
step machine
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader
if ! python3 -c "import transformers, deepspeed; assert transformers.__version__ == '5.24.0'" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site "$W"/transformers-*.whl \
    "$W"/datasets-*.whl "$W"/dill-*.whl "$W"/multiprocess-*.whl "$W"/tokenizers-*.whl "$W"/hjson-*.whl \
    "$W"/pydantic-*.whl "$W"/pydantic_core-*.whl "$W"/annotated_types-*.whl "$W"/typing_inspection-*.whl \
    "$W"/fsspec-*.whl || exit 1
  DS_BUILD_OPS=0 python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target /tmp/site \
    "$W"/deepspeed-0.19.8.tar.gz > "$L/deepspeed-install.log" 2>&1 || tail -20 "$L/deepspeed-install.log"
fi
for pkg in liger_kernel torchao; do
  python3 -c "import $pkg" 2>/dev/null ||
    python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site "$W/$pkg"-*.whl
done
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "import torch, transformers, deepspeed, liger_kernel, triton; print('torch', torch.__version__, 'transformers', transformers.__version__, 'deepspeed', deepspeed.__version__, 'triton', triton.__version__)" 2>&1 | tail -2
GIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 | awk '{print $1 / 1024}')

step "data: tokenizers and artifacts"
CORPUS=/tmp/bench-corpus.txt
python3 -c "from pydoc_data.topics import topics; open('$CORPUS', 'w').write(('\n\n'.join(topics.values()) + '\n\n') * 16)"
for m in bert:30522:40 gpt2:50257:12; do
  IFS=: read -r name size steps <<< "$m"
  [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -q "^$name" && continue  # only the models the variants asked for train
  if [ -f "/tmp/bench-tok/$name-$size/tokenizer.json" ]; then  # made by make bench on this machine
    mkdir -p /tmp/tok && rm -rf "/tmp/tok/$name-$size" && cp -r "/tmp/bench-tok/$name-$size" /tmp/tok/
  else
    python3 -m train.controller.resolve resolve --model "$name" --overrides '{"accelerator": "cuda", "run_name": "tok"}' \
      --out "/tmp/tok-$name.json" > /dev/null &&
    python3 -m train.data.prepare_data --job "/tmp/tok-$name.json" --out "/tmp/tok/$name-trained" > "$L/tok-$name.log" 2>&1 &&
    python3 -m train.tools.bench pad-tokenizer "/tmp/tok/$name-trained/tokenizer" "/tmp/tok/$name-$size" --size "$size"
  fi &&
  python3 -m train.controller.resolve resolve --model "$name" --world-size 1 --gpu-memory-gib "$GIB" \
    --overrides "{\"accelerator\": \"cuda\", \"run_name\": \"x\", \"tokenizer_path\": \"/tmp/tok/$name-$size\", \"dataset_path\": \"$CORPUS\", \"warmup_steps\": 5, \"logging_steps\": 10, \"save_steps\": 100000, \"max_steps\": $steps}" \
    --out "/tmp/job-$name.json" &&
  python3 -m train.data.prepare_data --job "/tmp/job-$name.json" --out "/tmp/data-$name" > "$L/data-$name.log" 2>&1 &&
  python3 -m train.controller.dsconfig render --job "/tmp/job-$name.json" --world-size 1 --templates templates/deepspeed \
    --out "/tmp/ds-$name.json" > /dev/null &&
  python3 -m train.controller.resolve argv "/tmp/job-$name.json" --dataset-dir "/tmp/data-$name" --output-dir /tmp/unused \
    --deepspeed "/tmp/ds-$name.json" > "/tmp/argv-$name.json" || { tail -20 "$L"/*-"$name".log; exit 1; }
done

variant() {  # name model expected_s [pretrain flags...]: stopped at the deadline
  local name=$1 model=$2 need=$3; shift 3
  local left=$(( DEADLINE - $(date +%s) ))
  if [ "$left" -lt "$need" ]; then echo "$name: not run ($left s left, ~$need s needed)"; return; fi
  step "$name: $*"
  # CFG='{...}' (the caller's environment): fields merged into the argv's --config_overrides (the model's config)
  local args; mapfile -t args < <(python3 - "/tmp/argv-$model.json" "${CFG:-}" <<'PYEOF'
import json, sys
argv, extra = json.load(open(sys.argv[1])), json.loads(sys.argv[2] or "{}")
if extra:
    i = argv.index("--config_overrides") + 1
    argv[i] = json.dumps({**json.loads(argv[i]), **extra}, separators=(",", ":"))
print("\n".join(argv))
PYEOF
)
  local s; s=$(date +%s)
  timeout "$left" python3 -m train.rank.pretrain "${args[@]}" --output_dir "/tmp/runs/$name" "$@" > "$L/$name.log" 2>&1
  local rc=$?
  grep -E "error|Error|step .*/" "$L/$name.log" | tail -3
  python3 - "$name" "$rc" "$(( $(date +%s) - s ))" "/tmp/runs/$name" <<'PYEOF' | tee -a "$OUT/results.txt"
import json, sys
from pathlib import Path
name, rc, wall, d = sys.argv[1:]
def load(f):
    p = Path(d) / f
    return json.loads(p.read_text()) if p.is_file() else {}
perf, m = load("perf.json"), load("metrics.json")
first = perf.get("first_step_end_unix_s"); start = (perf.get("startup") or {}).get("process_start")
print(f"RESULT {name}: rc {rc}, wall {wall} s, steady {perf.get('steady_samples_per_second')} samples/s "
      f"{perf.get('steady_tokens_per_second')} tokens/s over steps {perf.get('steady_steps')}, loss "
      f"{m.get('first_loss')} -> {m.get('last_loss')}, peak alloc "
      f"{round((perf.get('peak_memory_allocated_bytes') or 0) / 2**30, 1)} GiB, process start -> first step end "
      f"{round(first - start, 1) if first and start else None} s")
PYEOF
  rm -rf "/tmp/runs/$name"/model "/tmp/runs/$name"/checkpoint-*
}

# the variants, relative to the job's resolved defaults (the argv above)
ALL=(gpt2 gpt2-old gpt2-liger bert bert-old bert-m256 bert-m64 gpt2-m128 bert-autotune bert-cudagraphs
     bert-m256-cudagraphs bert-fp8 bert-fp8-row bert-fp8-row-gw bert-cdt bert-attn0 bert-attn0-cdt bert-nodrop
     bert-whole)
[ $# -gt 0 ] && LIST=("$@") || LIST=("${ALL[@]}")
for v in "${LIST[@]}"; do
  case $v in
    gpt2) variant "$v" gpt2 55 ;;
    gpt2-old) variant "$v" gpt2 55 --unpadded_attention false ;;  # the attention mask as before the key
    gpt2-liger) variant "$v" gpt2 55 --fused_cross_entropy true ;;
    gpt2-m128) variant "$v" gpt2 55 --per_device_train_batch_size 128 --gradient_accumulation_steps 4 ;;
    bert) variant "$v" bert 28 ;;
    bert-old) variant "$v" bert 28 --unpadded_attention false ;;
    bert-m256) variant "$v" bert 28 --per_device_train_batch_size 256 --gradient_accumulation_steps 1 ;;
    bert-m64) variant "$v" bert 28 --per_device_train_batch_size 64 --gradient_accumulation_steps 4 ;;
    bert-autotune) variant "$v" bert 120 --torch_compile_mode max-autotune-no-cudagraphs ;;
    # CUDA graphs (torch.compile's cudagraph trees) around each compiled region: no launch gaps. With gradient
    # accumulation (bert's 128 x 2) the next micro batch's replay overwrites outputs saved for backward and the run
    # stops; at 256 x 1 it runs, no faster (docs/benchmarks/gpu-2026-12-05b.md)
    bert-cudagraphs) variant "$v" bert 45 --torch_compile_mode reduce-overhead ;;
    # float8 matmuls in BERT's layers (torchao's float8 training recipes; job key float8)
    bert-fp8) variant "$v" bert 60 --float8 tensorwise ;;
    bert-fp8-row) variant "$v" bert 60 --float8 rowwise ;;
    bert-fp8-row-gw) variant "$v" bert 60 --float8 rowwise_with_gw_hp ;;
    # Inductor's coordinate-descent tuning of its Triton kernels' block sizes (the pointwise and layer-norm kernels
    # are a third of a bert step's GPU time, at ~60 % of the memory bandwidth in gpu-2026-12-06's profile)
    bert-cdt) TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1 variant "$v" bert 60 ;;
    bert-attn0) CFG='{"attention_probs_dropout_prob": 0.0}' variant "$v" bert 28 ;;
    bert-attn0-cdt) CFG='{"attention_probs_dropout_prob": 0.0}' TORCHINDUCTOR_COORDINATE_DESCENT_TUNING=1 \
                      variant "$v" bert 60 ;;
    bert-nodrop) CFG='{"attention_probs_dropout_prob": 0.0, "hidden_dropout_prob": 0.0}' variant "$v" bert 28 ;;
    bert-whole) variant "$v" bert 45 --regional_compilation false ;;
    bert-m256-cudagraphs) variant "$v" bert 45 --torch_compile_mode reduce-overhead --per_device_train_batch_size 256 \
                            --gradient_accumulation_steps 1 ;;
    *) echo "unknown variant $v" ;;
  esac
done
step "results"
cat "$OUT/results.txt"
tar -C "$L" -czf "$OUT/logs.tar.gz" .
