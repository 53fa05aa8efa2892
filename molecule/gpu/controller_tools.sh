# Sourced by bench.sh and validate.sh (W = the .whl/ directory of docs/gpu-validation.md): the controller's tools on
# a GPU machine with no network -- ansible-core from wheels into /tmp/site, the collections from their tarball, and
# rsync unpacked from its .deb files when the machine lacks it. Returns 1 when the wheels do not install. Both are
# byte-compiled as pip does on a user's controller: the image sets PYTHONDONTWRITEBYTECODE=1, so Python never
# caches them itself, and each ansible-playbook start would compile ansible's ~1,000 modules anew (seconds).
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site \
  "$W"/ansible_core-*.whl "$W"/resolvelib-*.whl "$W"/cryptography-*.whl "$W"/cffi-*.whl "$W"/pycparser-*.whl || return 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
mkdir -p /tmp/coll && tar -C /tmp/coll -xzf "$W/collections.tar.gz" && export ANSIBLE_COLLECTIONS_PATH=/tmp/coll
python3 -m compileall -q -j 0 /tmp/site /tmp/coll > /dev/null || true  # what pip left out, and the collections
if ! command -v rsync >/dev/null; then
  for d in "$W"/*.deb; do dpkg -x "$d" /tmp/rsroot; done
  export PATH=/tmp/rsroot/usr/bin:$PATH LD_LIBRARY_PATH=/tmp/rsroot/usr/lib/x86_64-linux-gnu
fi
