#!/usr/bin/env bash
# The roles' molecule scenarios (roles/<role>/molecule/<scenario>), one `molecule test` each, in site.yml's order,
# with a time per scenario and a summary at the end. Exit status 1 when any failed (all are still run).
# Every scenario's molecule.yml is merged onto .config/molecule/config.yml (what they share): molecule finds it by
# itself in a git checkout; --base-config names it here for a copy without .git.
#
#   molecule/roles.sh                        # every scenario below
#   molecule/roles.sh cuda/distro nccl       # some: role or role/scenario
#
# cuda/distro spends its time downloading and unpacking 1.6 GB of packages rather than on the CPU: it runs in the
# background next to the others. The others run in DSC_MOLECULE_LANES lanes (default 2: a scenario waits on pip,
# apt and podman much of its time), longest first into the lane with the least work; each scenario's log is printed
# whole when it ends, so lanes never interleave. DSC_MOLECULE_SERIAL=1 runs everything in line, its output live.
# Needs root, podman and the localhost/bookworm-node image (molecule/images/build.sh), and the wheelhouse
# (molecule/images/wheelhouse.sh) for python_env and deepspeed; both are made here when missing.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
all=(cuda/preinstalled cuda/distro python_env/default nccl/default deepspeed/default node_env/default)
background=cuda/distro
want=("$@")
((${#want[@]})) || want=("${all[@]}")
export ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-0} PY_COLORS=${PY_COLORS:-0}
# the slowest tasks and the time of each playbook, at the end of each
export ANSIBLE_CALLBACKS_ENABLED=${ANSIBLE_CALLBACKS_ENABLED:-ansible.posix.profile_tasks,ansible.posix.timer}

selected=()
for sc in "${all[@]}"; do
  for w in "${want[@]}"; do
    if [[ $w == "$sc" || $w == "${sc%%/*}" ]]; then selected+=("$sc"); break; fi
  done
done
for w in "${want[@]}"; do
  matched=0
  for sc in "${all[@]}"; do [[ $w == "$sc" || $w == "${sc%%/*}" ]] && matched=1; done
  ((matched)) || { echo "no scenario matches: $w (known: ${all[*]})" >&2; exit 2; }
done

"$repo/molecule/images/build.sh" || exit 1
# python_env and deepspeed install from the wheelhouse
if printf '%s\n' "${selected[@]}" | grep -qE '^(python_env|deepspeed)/'; then
  "$repo/molecule/images/wheelhouse.sh" || exit 1
fi

run() {  # run SCENARIO: molecule test, then one summary line in $results/SCENARIO
  local sc=$1 t0 result
  t0=$(date +%s)
  printf '== %s molecule test: roles/%s/molecule/%s\n' "$(date +%T)" "${sc%%/*}" "${sc##*/}"
  if (cd "$repo/roles/${sc%%/*}" && molecule --base-config "$repo/.config/molecule/config.yml" test -s "${sc##*/}"); then
    result=passed
  else
    result=FAILED
  fi
  printf '%-22s %-7s %4d s\n' "$sc" "$result" $(( $(date +%s) - t0 )) >"$results/${sc//\//_}"
}

results=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$results"' EXIT
# about how long each scenario takes alone on 2 cores (docs/benchmarks/provisioning-and-demo.md): to fill the lanes
declare -A seconds=([cuda/preinstalled]=110 [python_env/default]=200 [nccl/default]=110 [deepspeed/default]=165
                    [node_env/default]=70)
run_kept() {  # run SCENARIO with its output kept until it ends, then printed whole
  local sc=$1 log="$results/${sc//\//_}.log"
  run "$sc" >"$log" 2>&1
  { flock 9; cat "$log"; } 9>"$results/print.lock"
}
lanes=${DSC_MOLECULE_LANES:-2}
[[ -n ${DSC_MOLECULE_SERIAL:-} ]] && lanes=1
queue=()
for sc in "${selected[@]}"; do
  if [[ $sc == "$background" && ${#selected[@]} -gt 1 && $lanes -gt 1 ]]; then
    echo "== $(date +%T) $sc runs in the background; its log follows when it ends"
    run_kept "$sc" &
    pids+=($!)
  else
    queue+=("$sc")
  fi
done
if ((lanes <= 1 || ${#queue[@]} <= 1)); then
  for sc in "${queue[@]}"; do run "$sc"; done
else
  declare -a lane_work lane_list
  for ((l = 0; l < lanes; l++)); do lane_work[l]=0; lane_list[l]=""; done
  while read -r _ sc; do  # longest first, each into the lane with the least work so far
    best=0
    for ((l = 1; l < lanes; l++)); do ((lane_work[l] < lane_work[best])) && best=$l; done
    lane_work[best]=$(( lane_work[best] + ${seconds[$sc]:-120} ))
    lane_list[best]+=" $sc"
  done < <(for sc in "${queue[@]}"; do echo "${seconds[$sc]:-120} $sc"; done | sort -rn)
  for ((l = 0; l < lanes; l++)); do
    [[ -n ${lane_list[l]} ]] || continue
    echo "== $(date +%T) lane $((l + 1)):${lane_list[l]}"
    (for sc in ${lane_list[l]}; do run_kept "$sc"; done) &
    pids+=($!)
  done
fi
for p in "${pids[@]}"; do wait "$p"; done
pids=()

echo "== role scenarios"
failed=0
for sc in "${selected[@]}"; do
  f="$results/${sc//\//_}"
  if [[ -f $f ]]; then printf '   %s' "$(cat "$f")"; echo; else printf '   %-22s %s\n' "$sc" "did not finish"; fi
  grep -q ' passed ' "$f" 2>/dev/null || failed=1
done
exit $failed
