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
# background next to the others (its log is printed when it ends); DSC_MOLECULE_SERIAL=1 runs it in line.
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
bg_pid=
trap '[[ -n $bg_pid ]] && kill "$bg_pid" 2>/dev/null; rm -rf "$results"' EXIT
for sc in "${selected[@]}"; do
  if [[ $sc == "$background" && ${#selected[@]} -gt 1 && -z ${DSC_MOLECULE_SERIAL:-} ]]; then
    echo "== $(date +%T) $sc runs in the background; its log follows when it ends"
    run "$sc" >"$results/background.log" 2>&1 &
    bg_pid=$!
  else
    run "$sc"
  fi
done
if [[ -n $bg_pid ]]; then
  wait "$bg_pid"
  echo "== $(date +%T) log of $background (ran in the background)"
  cat "$results/background.log"
fi

echo "== role scenarios"
failed=0
for sc in "${selected[@]}"; do
  f="$results/${sc//\//_}"
  if [[ -f $f ]]; then printf '   %s' "$(cat "$f")"; echo; else printf '   %-22s %s\n' "$sc" "did not finish"; fi
  grep -q ' passed ' "$f" 2>/dev/null || failed=1
done
exit $failed
