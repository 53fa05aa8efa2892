#!/usr/bin/env bash
# Build the test-node image(s) the molecule scenarios use, from Debian's own packages (no image registry is
# reachable from CI): debootstrap a minimal Debian 12 root file system and `podman import` it.
#
#   molecule/images/build.sh            # localhost/bookworm-node (sshd, python3, sudo, rsync) if missing
#   molecule/images/build.sh --force    # rebuild
#
# Also prepares this machine for rootful podman on hosts where crun cannot set rlimits or use hybrid cgroups
# (runc, nofile 20000).
set -euo pipefail
IMAGE=${IMAGE:-localhost/bookworm-node}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
force=${1:-}

need=()
for cmd in podman debootstrap runc; do command -v "$cmd" >/dev/null || need+=("$cmd"); done
if ((${#need[@]})); then
  echo "== installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman debootstrap runc >/dev/null
fi

conf=/etc/containers/containers.conf
if ! grep -q 'deepspeed-cluster test nodes' "$conf" 2>/dev/null; then
  mkdir -p /etc/containers
  cat >>"$conf" <<'CONF'
# deepspeed-cluster test nodes: runc (crun cannot set rlimits here) and limits at or below the machine's.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
runtime = "runc"
CONF
fi

if [[ "$force" != "--force" ]] && podman image exists "$IMAGE"; then
  echo "== $IMAGE exists (use --force to rebuild)"
  exit 0
fi

rootfs=$(mktemp -d /var/tmp/bookworm-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "== debootstrap $SUITE -> $rootfs (about 90 s)"
debootstrap --variant=minbase \
  --include=python3,python3-apt,openssh-server,openssh-client,sudo,rsync,iproute2,ca-certificates,procps,locales \
  "$SUITE" "$rootfs" "$MIRROR" >/dev/null
# Test setup only (a real cluster has no such CA): this machine re-signs HTTPS with a local CA that nodes need.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
  chroot "$rootfs" update-ca-certificates >/dev/null
fi
mkdir -p "$rootfs/run/sshd"
rm -f "$rootfs"/etc/ssh/ssh_host_*            # every container makes its own host keys at start
echo "== podman import -> $IMAGE"
tar -C "$rootfs" -c . | podman import --change 'CMD ["/bin/sh", "-c", "ssh-keygen -A && exec /usr/sbin/sshd -D -e"]' - "$IMAGE" >/dev/null
echo "== built $IMAGE"
