"""Jinja filters of the torch_matrix role: which torch build a node gets, and whether its GPUs and driver run it.

    torch_matrix_choice: "{{ torch_matrix_lines | torch_matrix_choose(accelerator, cuda_version, pin, machine, ...) }}"
    problems: "{{ torch_matrix_choice | torch_matrix_gpu_problems(gpus, host) }}"

The table they read is ``torch_matrix_lines`` (roles/torch_matrix/defaults/main.yml); these functions hold the rules,
not the facts. Sources of the rules:
  * GPU code compatibility (CUDA C Programming Guide, "Binary Compatibility" and "PTX Compatibility"): a cubin built
    for compute capability X.y runs on X.z for z >= y (same major only); PTX built for P is JIT-compiled by the driver
    for any capability >= P.
  * Driver minimum (NVIDIA CUDA Compatibility guide, "Minor Version Compatibility", table 1): an application built with
    CUDA major M runs on any driver at or above the minimum of M's family (torch wheels carry their own runtime).
  * nvidia-smi's ``compute_cap`` query field exists from driver R510 on; older drivers answer ``Field "compute_cap"
    is not a valid field to query`` (exit 2), so the preflight asks for it separately.
"""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version


def _ver(text):
    """"12.6" or "580.65.06" -> tuple of ints, (12, 6) / (580, 65, 6); unparsable parts -> 0."""
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.]", str(text).strip()) if p != "")


def _variant_of(accelerator, cuda_version):
    """PyTorch's build label: "cpu", or "cu" + major + minor ("12.6" -> "cu126")."""
    return "cpu" if accelerator != "cuda" else "cu" + str(cuda_version).replace(".", "")


def _release_line(lines, release):
    """Name of the line whose torch release is ``release`` (compared as versions: "2.13" is 2.13.0; a local label
    is ignored), or None."""
    base = _public(release)
    for name, line in lines.items():
        if base is not None and _public(line["torch"]) == base:
            return name
    return None


def _public(release):
    """packaging's Version of ``release`` without its local label, or None when it is not a version."""
    try:
        return Version(Version(str(release).strip()).public)
    except InvalidVersion:
        return None


def _where(lines):
    """"torch 2.13.0 is built for cpu, cu126 and cu130; torch 2.7.1 for cu118" (newest line first)."""
    parts = []
    for i, (_, line) in enumerate(_newest_first(lines)):
        variants = [v for v in line["variants"]]
        names = ", ".join(variants[:-1]) + (" and " if len(variants) > 1 else "") + variants[-1]
        parts.append(("torch %s is built for %s" if i == 0 else "torch %s for %s") % (line["torch"], names))
    return "; ".join(parts)


def _newest_first(lines):
    return sorted(lines.items(), key=lambda kv: _ver(kv[1]["torch"]), reverse=True)


def _cuda_of(variant):
    """"cu126" -> "12.6", "cu118" -> "11.8"; "cpu" -> ""."""
    if not variant.startswith("cu"):
        return ""
    digits = variant[2:]
    return digits[:-1] + "." + digits[-1]


def torch_matrix_choose(lines, accelerator, cuda_version="", pin="", machine="x86_64", last_releases=None,
                        driver_minimums=None):
    """The torch build, package pins and hardware requirements one node gets.

    Args:
      lines: ``torch_matrix_lines``: line name -> {torch, python, deepspeed, packages: [str], variants:
        {variant: {archs: {machine: [capability "X.Y"]}, ptx: {machine: "X.Y"}}}}.
      accelerator: "cpu" or "cuda".
      cuda_version: "major.minor" (accelerator=cuda).
      pin: python_env_torch_version, "" = let cuda_version choose the line.
      machine: ansible_facts['architecture'] (x86_64, aarch64).
      last_releases: variant -> last torch release built for it, for variants no line has (refusal hints).
      driver_minimums: CUDA major (str) -> minimum driver version for minor-version compatibility.

    Returns:
      dict: ok (bool), msg (the refusal when not ok), warnings (list of str), line (name or ""), torch (release),
      variant, cuda, python (minimum interpreter "X.Y"), deepspeed, packages (list; [] when refused),
      archs (list of "X.Y" the build contains for ``machine``, None when unknown), ptx ("X.Y" or ""),
      driver_min ("" for cpu). Never raises for user input: a refusal is ``ok: False`` with ``msg``.
    """
    last_releases = dict(last_releases or {})
    driver_minimums = {str(k): str(v) for k, v in (driver_minimums or {}).items()}
    variant = _variant_of(accelerator, cuda_version)
    newest_name, newest = _newest_first(lines)[0]
    out = {"ok": True, "msg": "", "warnings": [], "line": "", "torch": "", "variant": variant,
           "cuda": str(cuda_version) if accelerator == "cuda" else "", "python": "", "deepspeed": "",
           "packages": [], "archs": None, "ptx": "", "driver_min": ""}
    if accelerator == "cuda":
        out["driver_min"] = driver_minimums.get(str(cuda_version).split(".")[0], "")
    pin = str(pin or "").strip()

    def refuse(msg):
        out.update(ok=False, msg=msg, packages=[])
        return out

    if accelerator == "cuda" and not (isinstance(cuda_version, str) and re.match(r"^[0-9]+\.[0-9]+$", cuda_version)):
        return refuse('accelerator=cuda needs cuda_version as a quoted "major.minor" string in the inventory, e.g. '
                      'cuda_version: "12.6" (unquoted 12.10 would read as 12.1); %s' % (
                          "it is not set" if cuda_version in ("", None) else "got %s" % (
                              '"%s"' % cuda_version if isinstance(cuda_version, str) else repr(cuda_version))))

    def take(name, line):
        info = line["variants"].get(variant) or {}
        out.update(line=name, torch=str(line["torch"]), python=str(line["python"]),
                   deepspeed=str(line["deepspeed"]), packages=list(line["packages"]))
        by_machine = info.get("archs") or {}
        archs = by_machine.get(machine)
        if variant != "cpu" and by_machine and archs is None:
            others = ['"%s" (torch %s+%s)' % (_cuda_of(v), l["torch"], v) for _, l in _newest_first(lines)
                      for v, i in l["variants"].items() if machine in ((i or {}).get("archs") or {})]
            return refuse("torch %s+%s is not built for %s (PyTorch publishes it for %s only). Use cuda_version %s."
                          % (line["torch"], variant, machine, ", ".join(sorted(by_machine)),
                             " or ".join(others) if others else "none: no build of the matrix is for " + machine))
        out["archs"] = [str(a) for a in archs] if archs is not None else None
        out["ptx"] = str((info.get("ptx") or {}).get(machine) or "")
        if variant != "cpu" and archs is None:
            out["warnings"].append("torch %s+%s: the matrix lists no GPU architectures for %s; the GPU check is "
                                   "skipped" % (line["torch"], variant, machine))
        return out

    def outside(release, why):
        """A pinned release the lines do not cover: installed with the newest line's pins, with a warning."""
        out.update(line="", torch=str(_public(release) or release), python=str(newest["python"]),
                   deepspeed=str(newest["deepspeed"]), packages=list(newest["packages"]), archs=None, ptx="")
        out["warnings"].append(
            "python_env_torch_version %s %s: torch %s+%s is installed with the pins of the torch %s line, which were "
            "not checked against it, and the GPU architecture check is skipped" % (
                pin, why, out["torch"], variant, newest["torch"]))
        return out

    if pin:
        if _public(pin) is None:
            return refuse("python_env_torch_version %r is not a torch release (e.g. 2.13.0); leave it empty to let "
                          "cuda_version choose (%s)" % (pin, _where(lines)))
        label = str(pin).split("+", 1)[1] if "+" in str(pin) else ""
        if label and label != variant:
            return refuse("python_env_torch_version %s names the %s build, but %s means %s: drop the +%s (the "
                          "build follows accelerator and cuda_version)" % (
                              pin, label, ('cuda_version %s' % cuda_version) if accelerator == "cuda"
                              else "accelerator cpu", variant, label))
        name = _release_line(lines, pin)
        if name is None:
            return outside(pin, "is outside the project's tested lines (%s)" % _where(lines))
        line = lines[name]
        if variant not in line["variants"]:
            if _public(last_releases.get(variant, "")) == _public(pin):
                return outside(pin, "with %s is a build the project does not test (%s)" % (variant, _where(lines)))
            return refuse("python_env_torch_version %s has no %s build in the project's matrix (%s). Set cuda_version "
                          "to one of %s, or remove the pin so that cuda_version chooses the line."
                          % (pin, variant, _where(lines),
                             ", ".join('"%s"' % _cuda_of(v) for v in line["variants"] if v != "cpu") or "none"))
        return take(name, line)

    for name, line in _newest_first(lines):
        if variant in line["variants"]:
            return take(name, line)
    hint = ""
    if variant in last_releases:
        hint = ", or python_env_torch_version %s for %s (the newest torch release built for it; outside the " \
               "tested lines)" % (last_releases[variant], variant)
    choices = []
    for _, line in _newest_first(lines):
        choices += ['"%s"' % _cuda_of(v) for v in line["variants"] if v != "cpu" and '"%s"' % _cuda_of(v) not in choices]
    return refuse("cuda_version %s has no torch build in the project's matrix: %s. Use cuda_version %s%s."
                  % (cuda_version, _where(lines), " or ".join([", ".join(choices[:-1]), choices[-1]]
                                                             if len(choices) > 1 else choices), hint))


def _runs(capability, archs, ptx):
    """True when a build with cubins for ``archs`` (and PTX for ``ptx``) runs on ``capability``."""
    cap = _ver(capability)
    for arch in archs:
        a = _ver(arch)
        if a[:1] == cap[:1] and a <= cap:
            return True
    return bool(ptx) and _ver(ptx) <= cap


def torch_matrix_alternatives(lines, capability, machine="x86_64"):
    """Variants of the matrix whose build runs on ``capability``: ["cu126 (torch 2.13.0)", ...], newest first."""
    found = []
    for _, line in _newest_first(lines):
        for variant, info in line["variants"].items():
            archs = (info.get("archs") or {}).get(machine)
            if variant == "cpu" or archs is None:
                continue
            if _runs(capability, archs, (info.get("ptx") or {}).get(machine)):
                found.append('cuda_version "%s" (torch %s+%s)' % (_cuda_of(variant), line["torch"], variant))
    return found


_NUMERIC = re.compile(r"^[0-9]+(\.[0-9]+)+$")


def torch_matrix_gpu_problems(choice, gpus, host, lines=None, machine="x86_64", driver_minimums=None,
                              driver_to_be_installed=False):
    """What keeps ``host``'s GPUs from running the chosen build.

    Args:
      choice: a result of torch_matrix_choose.
      gpus: nvidia-smi lines, ``--query-gpu=index,name,driver_version,compute_cap --format=csv,noheader`` (4 fields),
        or without ``compute_cap`` (3 fields: drivers before R510 cannot report it; the architecture check is then
        skipped with a note).
      host: inventory_hostname, named in every message.
      lines: torch_matrix_lines, for the alternatives an architecture refusal names.
      machine: ansible_facts['architecture'].
      driver_minimums: torch_matrix_driver_minimums, to name a cuda_version an old driver still runs.
      driver_to_be_installed: the cuda role is about to install a driver (cuda_install_driver, before the install):
        an old driver is a note, not a problem (checked again before torch is installed).

    Returns:
      {"problems": [str], "notes": [str]}: each problem names the host, the GPU, the variable and the fix.
      A value nvidia-smi reports as "[N/A]" is not judged (a note says so).
    """
    problems, notes = [], []
    build = "torch %s+%s" % (choice.get("torch"), choice.get("variant"))
    rows = []
    for raw in gpus or []:
        fields = [f.strip() for f in str(raw).split(",")]
        if len(fields) >= 3 and fields[0].isdigit():
            rows.append((fields + [""])[:4])
    if not rows:
        return {"problems": ["%s: nvidia-smi listed no GPU (%s). Check the NVIDIA driver on %s (nvidia-smi must list "
                             "the GPUs), or set accelerator: cpu for it." % (
                                 host, "; ".join(str(g) for g in gpus or []) or "no output", host)], "notes": []}
    driver = rows[0][2]
    minimum = choice.get("driver_min")
    if minimum and not _NUMERIC.match(driver):
        notes.append("%s: nvidia-smi reports the driver version as %r: not checked against %s" % (host, driver, minimum))
    elif minimum and _ver(driver) < _ver(minimum):
        runs = sorted(({str(m): v for m, v in (driver_minimums or {}).items() if _ver(driver) >= _ver(v)}),
                      key=int, reverse=True)
        served = ['"%s"' % _cuda_of(v) for _, l in _newest_first(lines or {}) for v in l["variants"]
                  if v != "cpu" and _cuda_of(v).split(".")[0] in runs]
        text = ("%s: NVIDIA driver %s is older than %s, the minimum for CUDA %s.x (NVIDIA's minor-version "
                "compatibility), which %s needs (cuda_version \"%s\")." % (
                    host, driver, minimum, str(choice.get("cuda", "")).split(".")[0], build, choice.get("cuda")))
        if driver_to_be_installed:
            notes.append(text + " The cuda role installs a newer driver (cuda_install_driver); it is loaded after "
                                "a reboot, and checked again before torch is installed.")
        else:
            problems.append(text + " Upgrade the driver on %s (cuda_install_driver: true installs NVIDIA's "
                                   "cuda-drivers package; reboot after), or set cuda_version %s, which this driver "
                                   "runs." % (host, " or ".join(dict.fromkeys(served)) if served else
                                              "(none of the matrix's: this driver is too old for all of them)"))
    archs = choice.get("archs")
    if archs is None:
        return {"problems": problems, "notes": notes}
    for index, name, _, capability in rows:
        if not capability or not _NUMERIC.match(capability):
            notes.append("%s: GPU %s %s reports no compute capability (%s): its architecture is not checked "
                         "against %s" % (host, index, name, capability or "driver before R510", build))
            continue
        if not _runs(capability, archs, choice.get("ptx")):
            alternatives = torch_matrix_alternatives(lines or {}, capability, machine)
            problems.append(
                "%s: GPU %s %s (compute capability %s) cannot run %s, which is built for %s%s. Set %s in the "
                "inventory for %s." % (host, index, name, capability, build,
                                       ", ".join("sm_" + a.replace(".", "") for a in archs),
                                       (" + PTX " + choice["ptx"]) if choice.get("ptx") else "",
                                       " or ".join(alternatives) if alternatives else
                                       "accelerator: cpu (no torch build of the matrix runs this GPU)", host))
    return {"problems": problems, "notes": notes}


class FilterModule:
    """torch_matrix_choose, torch_matrix_gpu_problems, torch_matrix_alternatives."""

    def filters(self):
        return {
            "torch_matrix_choose": torch_matrix_choose,
            "torch_matrix_gpu_problems": torch_matrix_gpu_problems,
            "torch_matrix_alternatives": torch_matrix_alternatives,
        }
