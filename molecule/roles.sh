#!/usr/bin/env bash
# The roles' molecule scenarios (roles/<role>/molecule/<scenario>), one `molecule test` each, in site.yml's order,
# with a time per scenario and a summary at the end. Exit status 1 when any failed (all are still run).
#
#   molecule/roles.sh                        # every scenario below
#   molecule/roles.sh cuda/distro nccl       # some: role or role/scenario
#
# Needs root, podman and the localhost/bookworm-node image (molecule/images/build.sh), and the wheelhouse
# (molecule/images/wheelhouse.sh) for python_env and deepspeed; both are made here when missing.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
all=(cuda/preinstalled cuda/distro python_env/default nccl/default deepspeed/default node_env/default)
want=("$@")
((${#want[@]})) || want=("${all[@]}")
export ANSIBLE_FORCE_COLOR=${ANSIBLE_FORCE_COLOR:-0} PY_COLORS=${PY_COLORS:-0}
# the slowest tasks and the time of each playbook, at the end of each
export ANSIBLE_CALLBACKS_ENABLED=${ANSIBLE_CALLBACKS_ENABLED:-ansible.posix.profile_tasks,ansible.posix.timer}

"$repo/molecule/images/build.sh" || exit 1
"$repo/molecule/images/wheelhouse.sh" || exit 1

summary=() failed=0
for sc in "${all[@]}"; do
  role=${sc%%/*} name=${sc##*/}
  selected=0
  for w in "${want[@]}"; do [[ $w == "$sc" || $w == "$role" ]] && selected=1; done
  ((selected)) || continue
  printf '== %s molecule test: roles/%s/molecule/%s\n' "$(date +%T)" "$role" "$name"
  t0=$(date +%s)
  if (cd "$repo/roles/$role" && molecule test -s "$name"); then result=passed; else result=FAILED; failed=1; fi
  summary+=("$(printf '%-22s %-7s %4d s' "$sc" "$result" $(( $(date +%s) - t0 )))")
done
printf '== role scenarios\n'
printf '   %s\n' "${summary[@]}"
exit $failed
