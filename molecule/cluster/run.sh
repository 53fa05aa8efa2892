#!/usr/bin/env bash
# Multi-node scenario: a 3-node cluster (head + 2 workers) of podman containers on one user network, provisioned
# and trained on with the repository's own commands, then checked by verify.py (pytest).
#
#   molecule/cluster/run.sh test        # create -> converge -> verify -> destroy (what `make cluster-test` runs)
#   molecule/cluster/run.sh create      # containers, controller key, wheelhouse
#   molecule/cluster/run.sh converge    # site.yml (with Slurm) + train.yml: pdsh, ansible, a user's script as a Slurm job
#   molecule/cluster/run.sh verify      # pytest molecule/cluster/verify.py
#   molecule/cluster/run.sh destroy
#
# Script-driven rather than `molecule test`: the nodes are reached over real ssh (the controller's key, per-host
# ports), which is what the ssh mesh and the data staging must work with; molecule's podman driver connects
# through `podman exec` instead. The steps keep molecule's names.
#
# Environment: DSC_CLUSTER_STATE (default /var/tmp/dsc-cluster: controller key, known_hosts, logs, results),
# ANSIBLE_BIN (default: the directory of the ansible-playbook on PATH), CLUSTER_MAX_STEPS (default 30).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
state=${DSC_CLUSTER_STATE:-/var/tmp/dsc-cluster}
export DSC_CLUSTER_STATE=$state
net=dsc-cluster
subnet=10.89.77.0/24
image=${IMAGE:-localhost/bookworm-node}
wheelhouse=${WHEELHOUSE:-$HOME/.cache/deepspeed-cluster/wheelhouse}
export WHEELHOUSE=$wheelhouse
max_steps=${CLUSTER_MAX_STEPS:-30}
# name  cluster address  ssh port  address the controller uses (ansible_host)
# The head is also on a second, "management" network (dsc-mgmt): the controller reaches it there, the other nodes
# reach it on the cluster network (inventory: ansible_host differs from cluster_address, as on many real clusters).
nodes=("head-1 10.89.77.10 22 10.89.78.10" "worker-1 10.89.77.11 22 10.89.77.11" "worker-2 10.89.77.12 2222 10.89.77.12")
mgmt_net=dsc-mgmt
mgmt_subnet=10.89.78.0/24
export ANSIBLE_ROLES_PATH=$repo/roles ANSIBLE_FORCE_COLOR=0 PYTHONUNBUFFERED=1
# the slowest tasks and the time of each playbook at its end (where the scenario's time goes)
export ANSIBLE_CALLBACKS_ENABLED=${ANSIBLE_CALLBACKS_ENABLED:-ansible.posix.profile_tasks}
inv=$here/inventory
log() { printf '== %s %s\n' "$(date +%T)" "$*"; }

create() {
  "$repo/molecule/images/build.sh"
  "$repo/molecule/images/wheelhouse.sh" "$wheelhouse"
  # /shared: one directory of this machine in every container, as an NFS export would be (verify.py's shared-storage test)
  mkdir -p "$state" "$state/shared"
  [[ -f $state/id_ed25519 ]] || ssh-keygen -q -t ed25519 -N '' -C dsc-cluster-controller -f "$state/id_ed25519"
  # isolate: no traffic between the two networks (the workers cannot reach the head's management address, as on a
  # real cluster whose management network only the head and the controller share); this machine reaches both
  podman network exists "$net" || podman network create -o isolate=true --subnet "$subnet" "$net" >/dev/null
  podman network exists "$mgmt_net" || podman network create -o isolate=true --subnet "$mgmt_subnet" "$mgmt_net" >/dev/null
  : >"$state/known_hosts"
  for n in "${nodes[@]}"; do
    read -r name addr port ctl <<<"$n"
    if ! podman container exists "dsc-$name"; then
      log "create dsc-$name ($addr:$port)"
      podman run -d --name "dsc-$name" --hostname "$name" --network "$net" --ip "$addr" \
        --shm-size=1g --ulimit nofile=20000:20000 --ulimit nproc=4096:4096 \
        -v "$wheelhouse:/srv/wheelhouse:ro" -v "$state/shared:/shared" "$image" \
        /bin/sh -c "ssh-keygen -A && exec /usr/sbin/sshd -D -e -p $port" >/dev/null
      if [[ $ctl != "$addr" ]]; then
        podman network connect --ip "$ctl" "$mgmt_net" "dsc-$name"
      fi
    fi
    podman exec -i "dsc-$name" sh -c 'mkdir -p -m 700 /root/.ssh && cat > /root/.ssh/authorized_keys' <"$state/id_ed25519.pub"
  done
  for n in "${nodes[@]}"; do
    read -r name _ port addr <<<"$n"
    for _ in $(seq 30); do
      ssh-keyscan -p "$port" "$addr" 2>/dev/null | sed "s/^$addr /[$addr]:$port /; s/^\[$addr\]:22 /$addr /" >>"$state/known_hosts" && \
        grep -q "$addr" "$state/known_hosts" && break
      sleep 1
    done
  done
}

playbook() { (cd "$repo" && ansible-playbook -i "$inv" "$@"); }

converge() {
  local t0
  # a variable of the admin's shell (node_env_passthrough) that every rank must get, in every launch mode, and that no
  # log may show: a fresh value each converge, kept for verify.py (test_the_admins_shell_variables_reach_every_rank)
  (umask 077 && python3 -c 'import secrets; print("hf_cluster" + secrets.token_hex(12))' >"$state/passed-token")
  HF_TOKEN=$(cat "$state/passed-token")
  export HF_TOKEN
  t0=$(date +%s)
  log "site.yml"
  playbook site.yml 2>&1 | tee "$state/site.log"
  # site.yml imports playbooks/ssh_mesh.yml; a site.yml without it gets it run here.
  if ! grep -q 'playbooks/ssh_mesh.yml' "$repo/site.yml"; then
    playbook playbooks/ssh_mesh.yml 2>&1 | tee -a "$state/site.log"
  fi
  log "site.yml took $(( $(date +%s) - t0 )) s"
  t0=$(date +%s)
  log "playbooks/check.yml (parity table, ssh, disks, all-reduce health check)"
  playbook playbooks/check.yml 2>&1 | tee "$state/check.log"
  log "check.yml took $(( $(date +%s) - t0 )) s"
  for mode in pdsh ansible; do
    t0=$(date +%s)
    log "train.yml launcher=$mode"
    rm -rf "$state/outputs/$mode"
    playbook train.yml -e model=bert -e model_size=tiny -e max_steps="$max_steps" -e logging_steps=5 \
      -e run_name="cluster-$mode-$(date +%s)" -e launcher="$mode" -e train_output_dir="$state/outputs/$mode" \
      -e train_poll_seconds=5 2>&1 | tee "$state/train-$mode.log"
    log "train.yml launcher=$mode took $(( $(date +%s) - t0 )) s"
  done
  # A user's own run_mlm.py-style script (docs/own-script.md): the test suite's USER_SCRIPT, its
  # text file on the head only (script_data), the tokenizer the first run prepared (staged on every node); submitted
  # as a Slurm job (-e launcher=slurm, docs/slurm.md: site.yml set Slurm up, slurm_enabled in the inventory).
  t0=$(date +%s)
  log "train.yml -e script=my_run_mlm.py -e launcher=slurm"
  # with a first line of this scenario's: each rank prints a digest of the HF_TOKEN it got (verify.py)
  (cd "$repo" && python3 -c 'import sys; from train.tests.test_run_script import USER_SCRIPT
probe = ("import hashlib, os, socket; print(\"[passed] %s HF_TOKEN sha256:%s\" % (socket.gethostname(), "
         "hashlib.sha256(os.environ.get(\"HF_TOKEN\", \"\").encode()).hexdigest()[:16]), flush=True)\n")
open(sys.argv[1], "w").write(probe + USER_SCRIPT)' "$state/my_run_mlm.py")
  podman exec "dsc-head-1" python3 -c 'import os, pydoc_data.topics as t
os.makedirs("/root/corpus", exist_ok=True)
lines = [l.strip() for v in t.topics.values() for l in v.splitlines() if len(l.split()) > 6]
open("/root/corpus/train.txt", "w").write("\n".join(lines[:2000]) + "\n")'
  local tokenizer
  tokenizer=$(podman exec dsc-head-1 sh -c 'ls -d /opt/deepspeed-cluster/local/data/*/tokenizer | head -1')
  rm -rf "$state/outputs/script"
  # Another user's job holds worker-2 until ours has waited in the queue for 10 s: the follower shows ours PENDING
  # with Slurm's reason, then RUNNING (verify.py)
  podman exec dsc-head-1 sbatch --job-name=blocker --nodelist=worker-2 --exclusive --output=/dev/null --wrap \
    'timeout 600 sh -c "until squeue -h --states=PENDING -o %j | grep -q my_run_mlm; do sleep 1; done"; sleep 10'
  playbook train.yml -e "$(python3 -c 'import json, sys; print(json.dumps({
    "script": sys.argv[1], "script_data": "/root/corpus", "train_output_dir": sys.argv[2], "train_poll_seconds": 5,
    "launcher": "slurm",
    "script_args": ["--train_file", "{data}/train.txt", "--tokenizer_name", sys.argv[3], "--config_overrides",
                    json.dumps({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                                "intermediate_size": 128}),
                    "--max_seq_length", "64", "--per_device_train_batch_size", "8", "--max_steps", "10",
                    "--learning_rate", "1e-3", "--warmup_steps", "2", "--logging_steps", "5", "--save_strategy", "no",
                    "--report_to", "none", "--disable_tqdm", "true", "--remove_unused_columns", "false"]}))' \
    "$state/my_run_mlm.py" "$state/outputs/script" "$tokenizer")" 2>&1 | tee "$state/train-script.log"
  log "train.yml -e script took $(( $(date +%s) - t0 )) s"
}

verify() {
  (cd "$repo" && python3 -m pytest -v -p no:cacheprovider --durations=30 "$here/verify.py" "$here/verify_faults.py" "$here/verify_resume.py")
}

destroy() {
  for n in "${nodes[@]}"; do
    read -r name _ _ <<<"$n"
    podman rm -f -t 0 "dsc-$name" >/dev/null 2>&1 || true
  done
  podman network rm "$net" >/dev/null 2>&1 || true
  podman network rm "$mgmt_net" >/dev/null 2>&1 || true
  rm -rf "$state/shared"  # the containers' shared storage: the next scenario starts with none
}

case ${1:-test} in
  create) create ;;
  converge) converge ;;
  verify) verify ;;
  destroy) destroy ;;
  test)
    t0=$(date +%s)
    destroy
    trap destroy EXIT
    create
    converge
    verify
    log "scenario took $(( $(date +%s) - t0 )) s"
    ;;
  *) echo "usage: $0 [test|create|converge|verify|destroy]" >&2; exit 2 ;;
esac
