#!/bin/bash
# GPU validation of the provisioning roles and the launch path on one GPU machine with no network
# (docs/gpu-validation.md). Run from the repository root:  molecule/gpu/validate.sh OUTDIR
# Expects .whl/ (wheels + deepspeed sdist + collections.tar.gz, see docs/gpu-validation.md) and inventory/h200.
set -u -o pipefail
OUT=${1:-/tmp/gpu-validate}
mkdir -p "$OUT"
exec > >(tee "$OUT/validate.log") 2>&1
W=$PWD/.whl
step() { echo; echo "=== $(date -u +%H:%M:%S) $*"; }

step machine
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
grep -E '^(PRETTY_NAME)=' /etc/os-release; nproc
python3 -c 'import sys, torch; print(sys.executable, torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
echo "nvcc: $(command -v nvcc) | $(nvcc --version | grep release)"; ls -d /usr/local/cuda* ; echo "TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-}"
echo "rsync: $(command -v rsync) pdsh: $(command -v pdsh) libaio.h: $(ls /usr/include/libaio.h 2>&1)"
python3 -m pip list 2>/dev/null | grep -iE '^(pyarrow|fsspec|huggingface.hub|transformers|datasets|accelerate|tokenizers|numpy|pydantic|hjson|nvidia-nccl-cu13|nvidia-ml-py|setuptools|wheel|ninja|deepspeed|pandas) '

step "controller tools: ansible-core from wheels, collections, rsync if missing"
. "$(dirname "$0")/controller_tools.sh" || exit 1
ansible-playbook --version | head -1
export ANSIBLE_FORCE_COLOR=0 PYTHONUNBUFFERED=1
EXTRA=(-e "python_env_wheelhouse=$W" -e "deepspeed_sdist_path=$W/deepspeed-0.19.8.tar.gz")
# DSC_GPU_OPS=minimal: only cpu_adam and fused_adam (the ops a bf16 AdamW job loads), a shorter build so that
# provisioning and training fit in one 10-minute device call; default: inventory/h200's DS_BUILD_OPS=1 set.
if [ "${DSC_GPU_OPS:-}" = minimal ]; then
  EXTRA+=(-e '{"deepspeed_expected_ops": ["cpu_adam", "fused_adam"], "deepspeed_build_ops_disabled": ["DS_BUILD_EVOFORMER_ATTN", "DS_BUILD_CUTLASS_OPS", "DS_BUILD_RAGGED_DEVICE_OPS", "DS_BUILD_GDS", "DS_BUILD_TRANSFORMER_INFERENCE", "DS_BUILD_INFERENCE_CORE_OPS", "DS_BUILD_SPATIAL_INFERENCE", "DS_BUILD_FP_QUANTIZER", "DS_BUILD_QUANTIZER", "DS_BUILD_RANDOM_LTD", "DS_BUILD_STOCHASTIC_TRANSFORMER", "DS_BUILD_TRANSFORMER", "DS_BUILD_RAGGED_OPS", "DS_BUILD_DEEP_COMPILE", "DS_BUILD_FUSED_LAMB", "DS_BUILD_FUSED_LION", "DS_BUILD_CPU_LION", "DS_BUILD_CPU_ADAGRAD", "DS_BUILD_PIN_MEMORY", "DS_BUILD_UTILS"]}')
fi

step "provision 1: ansible-playbook -i inventory/h200 playbooks/provision.yml --skip-tags base_install (no network for apt)"
s=$(date +%s)
ansible-playbook -i inventory/h200 playbooks/provision.yml --skip-tags base_install "${EXTRA[@]}" 2>&1 | tee "$OUT/provision1.log"
rc=$?; echo "provision 1: rc=$rc in $(( $(date +%s) - s )) s"
cp /opt/deepspeed-cluster/build/deepspeed/build-*.log "$OUT/deepspeed-build.log" 2>/dev/null
[ $rc -eq 0 ] || exit 1

if [ -z "${DSC_GPU_SKIP_RERUN:-}" ]; then
  step "provision 2 (idempotence)"
  s=$(date +%s)
  ansible-playbook -i inventory/h200 playbooks/provision.yml --skip-tags base_install "${EXTRA[@]}" 2>&1 | tee "$OUT/provision2.log" | tail -4
  echo "provision 2: rc=$? in $(( $(date +%s) - s )) s"
fi

step ds_report
/opt/torch/.venv/bin/ds_report 2>&1 | tee "$OUT/ds_report.txt"

step "train: ansible-playbook -i inventory/h200 train.yml -e model=bert -e model_size=tiny"
rm -rf /opt/deepspeed-cluster/local/torch_extensions/*
s=$(date +%s)
ansible-playbook -i inventory/h200 train.yml -e model=bert -e model_size=tiny -e launcher=pdsh 2>&1 | tee "$OUT/train-playbook.log" | grep -vE '^\s*$' | tail -40
echo "train: rc=$? in $(( $(date +%s) - s )) s"
run=$(ls -td outputs/*/ | head -1); echo "run dir: $run"; ls "$run"
cp "$run/metrics.json" "$OUT/" ; cp "$run/train.log" "$OUT/"
python3 -c "import json,sys; m=json.load(open('$run/metrics.json')); print({k: m.get(k) for k in ['world_size','steps','first_loss','last_loss','train_samples_per_second','wall_time_s','model','model_size','precision']})"

step "no JIT: torch_extensions dir and JIT messages in train.log"
find /opt/deepspeed-cluster/local/torch_extensions -mindepth 1 | head; echo "entries: $(find /opt/deepspeed-cluster/local/torch_extensions -mindepth 1 | wc -l)"
grep -ciE 'Building extension|Emitting ninja|JIT|Loading extension module|PyTorch extensions root' "$run/train.log"
grep -iE 'Basic Optimizer|FusedAdam|bf16|world_size' "$run/train.log" | head -8
step done
