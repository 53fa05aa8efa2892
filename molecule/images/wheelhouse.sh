#!/usr/bin/env bash
# The wheelhouse the test nodes install from. They cannot see this machine's pip configuration, which is what gives
# `pip install torch==2.13.0` a CPU build here; inside a node a plain pip would pull the multi-GB CUDA build. The same
# mechanism an air-gapped cluster uses (docs/air-gapped.md). Used by the role scenarios (roles/*/molecule) and
# the cluster scenario (molecule/cluster/run.sh).
#
#   molecule/images/wheelhouse.sh [DIR]     # default $WHEELHOUSE or ~/.cache/deepspeed-cluster/wheelhouse
#
# Contents: torch (CPU build) and the pinned packages of the torch line that publishes cpu, read from the matrix
# (roles/torch_matrix/defaults/main.yml) and python_env's packages for cpu nodes (roles/python_env/defaults/main.yml),
# plus DeepSpeed's source distribution (that line's deepspeed) and a deepspeed-sdist.tar.gz link to it, for the
# deepspeed role's deepspeed_sdist_path. pip skips what is already there; a
# .complete-<hash of the pins> file marks a finished download for those pins (nothing is asked of the index then).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-${WHEELHOUSE:-$HOME/.cache/deepspeed-cluster/wheelhouse}}
mkdir -p "$dir"
{ read -r reqs; read -r ds_version; } < <(python3 - "$repo/roles/torch_matrix/defaults/main.yml" \
    "$repo/roles/python_env/defaults/main.yml" <<'PY'
import sys, yaml
lines = yaml.safe_load(open(sys.argv[1]))["torch_matrix_lines"]
line = next(l for l in sorted(lines.values(), key=lambda l: [int(p) for p in l["torch"].split(".")], reverse=True)
            if "cpu" in l["variants"])
cpu_extra = yaml.safe_load(open(sys.argv[2]))["python_env_accelerator_packages"]["cpu"]
print(" ".join([f"torch=={line['torch']}+cpu", *line["packages"], *cpu_extra, "pip"]))
print(line["deepspeed"])
PY
)
[[ -n ${ds_version:-} ]] || { echo "error: no cpu line in roles/torch_matrix/defaults/main.yml" >&2; exit 1; }
stamp="$dir/.complete-$(printf '%s\n' $reqs "deepspeed==$ds_version" | sha256sum | cut -c1-16)"
if [[ -f $stamp ]]; then
  echo "== wheelhouse $dir is complete for these pins"
  exit 0
fi
printf '== %s wheelhouse %s\n' "$(date +%T)" "$dir"
# shellcheck disable=SC2086
pip download --quiet --disable-pip-version-check -d "$dir" $reqs 2> >(grep -v "^WARNING: Location" >&2)
pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: -d "$dir" \
  "deepspeed==$ds_version" 2> >(grep -v "^WARNING: Location" >&2)
ln -sfn "deepspeed-$ds_version.tar.gz" "$dir/deepspeed-sdist.tar.gz"
rm -f "$dir"/.complete-*
touch "$stamp"
