#!/usr/bin/env bash
# The roles' molecule scenarios (roles/<role>/molecule/<scenario>), one `molecule test` each, in site.yml's order,
# with a time per scenario and a summary at the end. Exit status 1 when any failed (all are still run).
# Every scenario's molecule.yml is merged onto .config/molecule/config.yml (what they share): molecule finds it by
# itself in a git checkout; --base-config names it here for a copy without .git.
#
#   molecule/roles.sh                        # every scenario below
#   molecule/roles.sh cuda/distro nccl       # some: role or role/scenario
#
# Three lanes at once (DSC_MOLECULE_SERIAL=1 runs every scenario in line): cuda/distro, which spends its time
# downloading and unpacking 1.6 GB of packages rather than on the CPU, then node_env; deepspeed then nccl; and the
# rest (cuda/preinstalled, python_env) in the foreground: ~5-6 min of scenario time in each lane. Most of a
# scenario's time is one pip or apt process or Ansible's own work, each on one core, so two lanes on 2 cores finish
# well before one would (docs/benchmarks/provisioning-and-demo.md has the times). A background lane's log is printed
# when it ends.
# Needs root, podman and the localhost/bookworm-node image (molecule/images/build.sh), and the wheelhouse
# (molecule/images/wheelhouse.sh) for python_env and deepspeed; both are made here when missing.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
all=(cuda/preinstalled cuda/distro python_env/default nccl/default deepspeed/default node_env/default)
# the background lanes, each run in order; what no lane names runs in the foreground
lanes=("cuda/distro node_env/default" "deepspeed/default nccl/default")
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
bg_pids=() bg_names=()
trap 'for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$results"' EXIT
in_lane() {  # in_lane SCENARIO: the index of the background lane that names it, else nothing
  local i sc
  for i in "${!lanes[@]}"; do
    for sc in ${lanes[$i]}; do [[ $sc == "$1" ]] && { echo "$i"; return; }; done
  done
}
lane_of=()
for sc in "${selected[@]}"; do
  lane=
  ((${#selected[@]} > 1)) && [[ -z ${DSC_MOLECULE_SERIAL:-} ]] && lane=$(in_lane "$sc")
  lane_of+=("${lane:-fg}")
done
for i in "${!lanes[@]}"; do
  mine=()
  for j in "${!selected[@]}"; do [[ ${lane_of[$j]} == "$i" ]] && mine+=("${selected[$j]}"); done
  ((${#mine[@]})) || continue
  echo "== $(date +%T) ${mine[*]} run in the background, in this order; the log follows when they end"
  (for sc in "${mine[@]}"; do run "$sc"; done) >"$results/lane$i.log" 2>&1 &
  bg_pids+=($!) bg_names+=("${mine[*]}")
done
for j in "${!selected[@]}"; do
  [[ ${lane_of[$j]} == fg ]] && run "${selected[$j]}"
done
for i in "${!lanes[@]}"; do
  [[ -f $results/lane$i.log ]] || continue
  wait "${bg_pids[0]}"
  echo "== $(date +%T) log of ${bg_names[0]} (ran in the background)"
  bg_pids=("${bg_pids[@]:1}") bg_names=("${bg_names[@]:1}")
  cat "$results/lane$i.log"
done

echo "== role scenarios"
failed=0
for sc in "${selected[@]}"; do
  f="$results/${sc//\//_}"
  if [[ -f $f ]]; then printf '   %s' "$(cat "$f")"; echo; else printf '   %-22s %s\n' "$sc" "did not finish"; fi
  grep -q ' passed ' "$f" 2>/dev/null || failed=1
done
exit $failed
