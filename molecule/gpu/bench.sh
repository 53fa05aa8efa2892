#!/bin/bash
# The GPU benchmark (docs/benchmarks/gpu-<date>.md): on one GPU machine, from the repository root,
#   molecule/gpu/bench.sh OUTDIR            (make bench; expects .whl/ as docs/gpu-validation.md builds it)
# provisions the node (inventory/h200, ops cpu_adam + fused_adam pre-built), makes full-size tokenizers (the one
# prepare_data trains on the built-in corpus, padded to 30,522 / 50,257 entries), then trains through
# `ansible-playbook -i inventory/h200 train.yml` once per run -- bert with the blog's recipe, bert defaults (twice),
# bert and gpt2 with the other compilation mode, gpt2 defaults -- and writes OUTDIR/gpu-<date>.json + .md
# (python -m train.tools.bench report). Provisioning is skipped when $STATE/provisioned exists (an earlier call on this
# machine provisioned it; remove the file to provision again) or with DSC_BENCH_SKIP_PROVISION=1;
# DSC_BENCH_ONLY=provision stops after it. DSC_BENCH_RUNS picks runs (default all: "blog bert bert-warm bert-whole
# gpt2 gpt2-regional"; also bert-attn0 (BERT's attention dropout off), bert-fp8 and bert-fp8-row (float8 matmuls), bert-resume (40 steps, then -e resume= to 80), bert-m256, gpt2-m128; llama-1b, llama-1b-regional, gpt2-xl, gpt2-xl-regional, llama-8b; and scaling: bert and gpt2
# data-parallel on 1, 2, 4, 8 GPUs up to the machine's, -e slots=N): a device call of at most 10
# minutes holds provisioning or a few runs, so make bench can be split over calls on the same (warm) machine. The
# runs' records accumulate in DSC_BENCH_STATE (default /tmp/dsc-bench, outside OUT) and every call reports them all;
# OUT gets bench.log, logs.tar.gz (playbook and train logs) and the report (DSC_BENCH_STEM, default gpu-<date>).
# bert-warm repeats bert defaults with torch.compile's caches (node_env's TORCHINDUCTOR_CACHE_DIR / TRITON_CACHE_DIR
# on node-local disk) filled by the run before: its first step loads the kernels instead of compiling them. Every
# other compiled run -- bert, bert-whole (the whole model compiled as one graph, -e regional_compilation=false),
# gpt2, gpt2-regional (-e regional_compilation=true) -- starts with those caches emptied: a cold compile.
# The corpus: the built-in one (pydoc topics) repeated 16 times, so that an epoch holds several global batches
# (once: 99 GPT-2 blocks < 1 micro batch).
set -u -o pipefail
OUT=${1:-/tmp/gpu-bench}
STATE=${DSC_BENCH_STATE:-/tmp/dsc-bench}
RUNSET=" ${DSC_BENCH_RUNS:-blog bert bert-warm bert-whole gpt2 gpt2-regional} "
mkdir -p "$OUT" "$STATE/records" "$STATE/logs"
exec > >(tee -a "$OUT/bench.log") 2>&1
W=$PWD/.whl
PY=/opt/torch/.venv/bin/python
step() { echo; echo "=== $(date -u +%H:%M:%S) $*"; }

step machine
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader
. "$(dirname "$0")/controller_tools.sh" || exit 1
export ANSIBLE_FORCE_COLOR=0 PYTHONUNBUFFERED=1

if [ -f "$STATE/provisioned" ] && [ "${DSC_BENCH_ONLY:-}" != provision ]; then
  echo "provisioned by an earlier call on this machine ($STATE/provisioned)"
elif [ -z "${DSC_BENCH_SKIP_PROVISION:-}" ]; then
  step "provision (op: cpu_adam for the blog's offload; the defaults use torch's fused AdamW)"
  s=$(date +%s)
  ansible-playbook -i inventory/h200 playbooks/provision.yml --skip-tags base_install \
    -e "python_env_wheelhouse=$W" -e "deepspeed_sdist_path=$W/deepspeed-0.19.8.tar.gz" \
    -e '{"deepspeed_expected_ops": ["cpu_adam"], "deepspeed_build_ops_disabled": ["DS_BUILD_FUSED_ADAM", "DS_BUILD_EVOFORMER_ATTN", "DS_BUILD_CUTLASS_OPS", "DS_BUILD_RAGGED_DEVICE_OPS", "DS_BUILD_GDS", "DS_BUILD_TRANSFORMER_INFERENCE", "DS_BUILD_INFERENCE_CORE_OPS", "DS_BUILD_SPATIAL_INFERENCE", "DS_BUILD_FP_QUANTIZER", "DS_BUILD_QUANTIZER", "DS_BUILD_RANDOM_LTD", "DS_BUILD_STOCHASTIC_TRANSFORMER", "DS_BUILD_TRANSFORMER", "DS_BUILD_RAGGED_OPS", "DS_BUILD_DEEP_COMPILE", "DS_BUILD_FUSED_LAMB", "DS_BUILD_FUSED_LION", "DS_BUILD_CPU_LION", "DS_BUILD_CPU_ADAGRAD", "DS_BUILD_PIN_MEMORY", "DS_BUILD_UTILS"]}' \
    > "$STATE/logs/provision.log" 2>&1
  rc=$?; tail -3 "$STATE/logs/provision.log"; echo "provision: rc=$rc in $(( $(date +%s) - s )) s"
  [ $rc -eq 0 ] || { tail -40 "$STATE/logs/provision.log"; exit 1; }
  touch "$STATE/provisioned"
fi
if [ "${DSC_BENCH_ONLY:-}" = provision ]; then
  step "done (DSC_BENCH_ONLY=provision)"; exit 0
fi

step "full-size tokenizers: prepare_data's (built-in corpus) padded to 30522 / 50257 entries"
TOK=/tmp/bench-tok
CORPUS=/tmp/bench-corpus.txt
$PY -c "from pydoc_data.topics import topics; open('$CORPUS', 'w').write(('\n\n'.join(topics.values()) + '\n\n') * 16)"
for m in bert:30522 gpt2:50257 llama:128256; do
  case "$RUNSET" in *" llama"*) ;; *) [ "$m" = llama:128256 ] && continue ;; esac
  name=${m%%:*}; size=${m##*:}
  [ -f "$TOK/$name-$size/tokenizer.json" ] && { echo "$TOK/$name-$size: made by an earlier call"; continue; }
  $PY -m train.controller.resolve resolve --model "$name" --overrides '{"accelerator": "cuda", "run_name": "tok"}' --out "$TOK-$name.json" >/dev/null &&
  $PY -m train.data.prepare_data --job "$TOK-$name.json" --out "$TOK/$name-trained" > "$STATE/logs/tok-$name.log" 2>&1 &&
  $PY -m train.tools.bench pad-tokenizer "$TOK/$name-trained/tokenizer" "$TOK/$name-$size" --size "$size" || { tail "$STATE/logs/tok-$name.log"; exit 1; }
done

if [ ! -s "$STATE/importtime.txt" ]; then  # where a rank's imports go (the report's "Rank imports" line)
  step "rank imports: python -X importtime -c 'import train.rank.pretrain' (node venv)"
  env -u PYTHONPATH "$PY" -X importtime -c "import train.rank.pretrain" 2> "$STATE/importtime.tmp" &&
    mv "$STATE/importtime.tmp" "$STATE/importtime.txt"
  env -u PYTHONPATH "$PY" -c "import time, subprocess, sys; t = time.time(); subprocess.run([sys.executable, '-c', 'import train.rank.pretrain'], check=True); print(f'import train.rank.pretrain: {time.time() - t:.1f} s wall')" || true
fi
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
compile_caches() {  # torch.compile's cache directories as the ranks get them: the job environment node_env keeps in
  # the login profile (the same variables the launch passes to the ranks), and torch's own default
  sh -c '. "$HOME/.profile" >/dev/null 2>&1; for d in "$TORCHINDUCTOR_CACHE_DIR" "$TRITON_CACHE_DIR"; do [ -n "$d" ] && echo "$d"; done'
  echo "/tmp/torchinductor_$(id -un)"  # torch's own default, where the variables are not set
}
bench_run() {  # key (DSC_BENCH_RUNS), label, run name, profile steps ("" for none), -e arguments...
  local key=$1 label=$2 run=$3 prof=$4; shift 4
  case "$RUNSET" in *" $key "*) ;; *) return 0 ;; esac
  case "$key" in bert|bert-fp8*|bert-whole|gpt2|gpt2-regional|llama-*|gpt2-xl*)  # a cold compile: torch.compile's caches emptied (node_env's and torch's default)
    compile_caches | while read -r d; do [ -n "$d" ] && rm -rf "${d:?}"/*; done ;; esac
  step "$label: ansible-playbook -i inventory/h200 train.yml $*"
  local s; s=$(date +%s.%N)
  # profile_tasks: each task's start time in the log (train.tools.bench's "before the launcher" breakdown)
  DSC_PROFILE_STEPS=$prof ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks \
    timeout "${DSC_BENCH_TIMEOUT:-400}" ansible-playbook -i inventory/h200 train.yml -e "run_name=$run" "$@" > "$STATE/logs/$run.playbook.log" 2>&1
  local rc=$? e; e=$(date +%s.%N)
  grep -E 'run .*world size|samples/s|error|FAILED|fatal' "$STATE/logs/$run.playbook.log" | tail -8
  echo "$label: rc=$rc in $(python3 -c "print(round($e - $s, 1))") s"
  $PY - "$label" "$run" "$s" "$e" "$*" "${SERIES:-}" "$STATE/logs/$run.playbook.log" \
    > "$STATE/records/$(date +%s)-$key.json" <<'PYEOF'
import json, sys
label, run, s, e, args, series, log = sys.argv[1:]
print(json.dumps({"label": label, "run_name": run, "command": f"ansible-playbook -i inventory/h200 train.yml {args}",
                  "playbook_start_unix_s": float(s), "playbook_end_unix_s": float(e), "series": series or None,
                  "run_dirs": [f"outputs/{run}", f"/opt/deepspeed-cluster/runs/{run}"], "playbook_log": log}))
PYEOF
  cp "/opt/deepspeed-cluster/runs/$run/train.log" "$STATE/logs/$run.train.log" 2>/dev/null
  # the report reads metrics, perf and progress, not checkpoints: a 1B model's (~17 GB, on the node and again under
  # outputs/) would fill the machine's disk within two runs
  rm -rf "outputs/$run"/checkpoint-* "/opt/deepspeed-cluster/runs/$run/output"/checkpoint-*
}
COMMON=(-e dataset_path=$CORPUS -e warmup_steps=5 -e logging_steps=10 -e save_steps=100000)
BERT=(-e model=bert -e tokenizer_path=$TOK/bert-30522)
# the blog's recipe: fp16 + ZeRO-2 with the optimizer offloaded to the CPU, micro 16, no compile, the full head;
# zero_stage named: left auto, the memory plan takes offload_optimizer=cpu for ZeRO-3 with a quarter of the
# optimizer offloaded (its first offloading candidate), which is not the blog's: 34 samples/s on an H100
# (docs/benchmarks/gpu-2026-12-05b.md), against 84-116 with ZeRO-2 on the H200 runs before
bench_run blog "bert, the blog's recipe" "bench-bert-blog-$STAMP" "" "${BERT[@]}" -e max_steps=30 "${COMMON[@]}" \
  -e precision=fp16 -e zero_stage=2 -e offload_optimizer=cpu -e per_device_train_batch_size=16 -e gradient_accumulation_steps=1 \
  -e train_batch_size=null -e torch_compile=false -e mlm_head=full
bench_run bert "bert defaults" "bench-bert-$STAMP" "12:13" "${BERT[@]}" -e max_steps=60 "${COMMON[@]}"
bench_run bert-warm "bert defaults, second run (compile caches warm)" "bench-bert-warm-$STAMP" "" "${BERT[@]}" \
  -e max_steps=40 "${COMMON[@]}"
# BERT's attention dropout (0.1) off, as MosaicBERT and ModernBERT pre-train: cuDNN's attention without the dropout
# mask (BERT's attention kernels ran at ~190 TFLOP/s with it, docs/benchmarks/gpu-2026-12-05b.md); a recipe change,
# not a default: its loss beside the defaults' is in the report's settings lines
bench_run bert-attn0 "bert, attention dropout 0" "bench-bert-attn0-$STAMP" "12:13" "${BERT[@]}" -e max_steps=60 \
  "${COMMON[@]}" -e '{"model_config": {"attention_probs_dropout_prob": 0.0}}'
# float8 matmuls in BERT's layers (they need torchao in the node venv: provision with
# -e '{"python_env_packages_extra": ["torchao==0.18.0"]}'; job key float8: torchao's tensorwise recipe, the fastest of its recipes, and
# rowwise, finer scales): their losses beside the defaults' are in the report's settings lines
bench_run bert-fp8 "bert, float8 matmuls (tensorwise)" "bench-bert-fp8-$STAMP" "12:13" "${BERT[@]}" \
  -e max_steps=60 "${COMMON[@]}" -e float8=tensorwise
bench_run bert-fp8-row "bert, float8 matmuls (rowwise)" "bench-bert-fp8-row-$STAMP" "12:13" "${BERT[@]}" \
  -e max_steps=60 "${COMMON[@]}" -e float8=rowwise
# -e resume=: bert defaults (compile caches warm) for 40 steps with a checkpoint at step 40, then the same run resumed
# to step 80; the report holds the resumed attempt's progress line at its last step against the first attempt's
# steady rate (outputs/<run>/attempt-1/perf.json)
case "$RUNSET" in *" bert-resume "*)
  RESUMED="bench-bert-resume-$STAMP"
  RESUME_JOB=("${BERT[@]}" -e dataset_path=$CORPUS -e warmup_steps=5 -e logging_steps=10 -e save_steps=40)
  step "bert-resume, its first attempt (40 steps, a checkpoint at step 40)"
  timeout "${DSC_BENCH_TIMEOUT:-400}" ansible-playbook -i inventory/h200 train.yml -e "run_name=$RESUMED" \
    "${RESUME_JOB[@]}" -e max_steps=40 > "$STATE/logs/$RESUMED.first.playbook.log" 2>&1 ||
    echo "bert-resume: the first attempt failed (rc $?; $STATE/logs/$RESUMED.first.playbook.log)"
  # the same command line with -e resume= and a later max_steps, as a user goes on with a run
  bench_run bert-resume "bert defaults, resumed at step 40 (-e resume=)" "$RESUMED" "" "${RESUME_JOB[@]}" \
    -e resume="$RESUMED" -e max_steps=80 ;;
esac
bench_run bert-whole "bert defaults, whole-model compile" "bench-bert-whole-$STAMP" "12:13" "${BERT[@]}" \
  -e max_steps=60 "${COMMON[@]}" -e regional_compilation=false
bench_run bert-m256 "bert, micro 256 x 1" "bench-bert-m256-$STAMP" "" "${BERT[@]}" -e max_steps=40 "${COMMON[@]}" \
  -e per_device_train_batch_size=256 -e gradient_accumulation_steps=1
bench_run gpt2 "gpt2 defaults" "bench-gpt2-$STAMP" "2:2" -e model=gpt2 -e tokenizer_path=$TOK/gpt2-50257 -e max_steps=12 "${COMMON[@]}"
bench_run gpt2-m128 "gpt2, micro 128 x 4" "bench-gpt2-m128-$STAMP" "" -e model=gpt2 -e tokenizer_path=$TOK/gpt2-50257 \
  -e max_steps=12 "${COMMON[@]}" -e per_device_train_batch_size=128 -e gradient_accumulation_steps=4
bench_run gpt2-regional "gpt2, regional compilation" "bench-gpt2-regional-$STAMP" "2:2" -e model=gpt2 \
  -e tokenizer_path=$TOK/gpt2-50257 -e max_steps=12 "${COMMON[@]}" -e regional_compilation=true
# bigger models with the memory plan's own choices (ZeRO stage, offload, checkpointing, micro batch); a global batch
# of 128 sequences (not the presets' 512) and logging every 2 steps keep a run within a device call
BIG=(-e dataset_path=$CORPUS -e warmup_steps=2 -e logging_steps=2 -e save_steps=100000 -e train_batch_size=128
     -e max_steps=12)
bench_run llama-1b "llama 1b defaults" "bench-llama-1b-$STAMP" "" -e model=llama -e model_size=1b \
  -e tokenizer_path=$TOK/llama-128256 "${BIG[@]}"
bench_run llama-1b-regional "llama 1b, regional compilation" "bench-llama-1b-regional-$STAMP" "" -e model=llama \
  -e model_size=1b -e tokenizer_path=$TOK/llama-128256 "${BIG[@]}" -e regional_compilation=true
bench_run gpt2-xl "gpt2 xl defaults" "bench-gpt2-xl-$STAMP" "" -e model=gpt2 -e model_size=xl \
  -e tokenizer_path=$TOK/gpt2-50257 "${BIG[@]}"
bench_run gpt2-xl-regional "gpt2 xl, regional compilation" "bench-gpt2-xl-regional-$STAMP" "" -e model=gpt2 \
  -e model_size=xl -e tokenizer_path=$TOK/gpt2-50257 "${BIG[@]}" -e regional_compilation=true
# Llama 8B on one GPU: the plan's choice where 16 bytes a parameter fit neither the GPU nor 75 % of the host (ZeRO-3
# with part of the optimizer on the CPU); 16 sequences a step, 20 steps. No checkpoint (save_steps above): a ZeRO-3
# checkpoint of 8 B parameters (fp32 weights + optimizer states, ~129 GB) does not fit the machine's 64 GiB disk: the
# preflight would refuse the run for it (its final save), so here it only warns; the run's end fails, its steps count
bench_run llama-8b "llama 8b defaults" "bench-llama-8b-$STAMP" "" -e model=llama -e model_size=8b \
  -e tokenizer_path=$TOK/llama-128256 -e dataset_path=$CORPUS -e warmup_steps=2 -e logging_steps=2 \
  -e save_steps=100000 -e train_batch_size=16 -e max_steps=20 -e cluster_check_checkpoint_space=false
# data-parallel scaling: each preset at 1, 2, 4, 8 GPUs (up to the machine's) with the same per-GPU batch
# (the preset's micro batch, no accumulation): weak scaling, train.tools.bench's "scaling" table and efficiency target
# DSC_BENCH_SCALING_GPUS (default "1 2 4 8") picks the world sizes, so the runs can be split over device calls
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
for n in ${DSC_BENCH_SCALING_GPUS:-1 2 4 8}; do
  [ "$n" -le "$GPUS" ] || continue
  SERIES="bert defaults, per-GPU micro batch" bench_run scaling "bert, $n GPU(s)" "bench-scale-bert-$n-$STAMP" "" \
    "${BERT[@]}" -e max_steps=60 "${COMMON[@]}" -e slots=$n -e train_batch_size=null -e gradient_accumulation_steps=1
  SERIES="gpt2 defaults, per-GPU micro batch" bench_run scaling "gpt2, $n GPU(s)" "bench-scale-gpt2-$n-$STAMP" "" \
    -e model=gpt2 -e tokenizer_path=$TOK/gpt2-50257 -e max_steps=24 "${COMMON[@]}" -e slots=$n \
    -e train_batch_size=null -e gradient_accumulation_steps=1
done

step "report (every run recorded in $STATE so far)"
RUNS=$STATE/runs.json
$PY -c "import json, sys; print(json.dumps([json.load(open(f)) for f in sorted(sys.argv[1:])], indent=1))" \
  "$STATE"/records/*.json > "$RUNS.tmp" && mv "$RUNS.tmp" "$RUNS"
commit=${DSC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
notes=()
[ -n "${DSC_BENCH_NOTE:-}" ] && notes=(--note "$DSC_BENCH_NOTE")
$PY -m train.tools.bench report --runs "$RUNS" --out "$OUT" --command "make bench (molecule/gpu/bench.sh)" --commit "$commit" \
  --importtime "$STATE/importtime.txt" ${DSC_BENCH_STEM:+--stem "$DSC_BENCH_STEM"} "${notes[@]}"
tar -C "$STATE" -czf "$OUT/logs.tar.gz" logs records runs.json $(cd "$STATE" && ls importtime.txt 2>/dev/null)
step done
