#!/usr/bin/env python3
"""One question: does a refactor change the kernels' machine code? Compares the SASS of
the kernel objects of two builds, kernel by kernel, without a GPU: each object's
embedded fatbin is cut into its cubins (one per architecture; a compressed one is
unpacked), disassembled with nvdisasm, and every kernel, found by its symbol in
whichever object holds it, is reported as identical, relabelled (the same instructions
and registers; only the numbers of labels and internal helpers differ, which follow a
unit's contents), renamed (the same instructions up to register numbers), or different
(with the opcodes whose counts changed).

    python3 bench/lab/sass_compare.py OLD_BUILD NEW_BUILD [--match fwd_sm90] [--ops]

OLD_BUILD / NEW_BUILD: build folders (their CMakeFiles/fa2_objects*.dir/kernels/*.o) or
two object files. nvdisasm: $NVDISASM, else on PATH, else the one PyPI's
nvidia-cuda-nvdisasm wheel installs (pip install nvidia-cuda-nvdisasm). Compressed
cubins (nvcc --compress-mode=size, the library's default with nvcc 13) need PyPI's
zstandard."""
import argparse
import collections
import glob
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

FATBIN_MAGIC = 0xBA55ED50
ENTRY_ELF = 2


def fatbin_section(obj):
    """The .nv_fatbin section of an object file, as bytes (b'' when it has none)."""
    with tempfile.NamedTemporaryFile() as out:
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", obj, out.name],
                       check=True, capture_output=True)
        return open(out.name, "rb").read()


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def unpack(payload):
    """A fatbin entry's payload, unpacked when nvcc compressed it (zstd)."""
    if not payload.startswith(ZSTD_MAGIC):
        return payload
    import zstandard
    return zstandard.ZstdDecompressor().decompressobj().decompress(payload)


def cubins(fatbin):
    """The ELF entries (cubins) of a fatbin section: {arch: bytes}."""
    found, off = {}, 0
    while off + 16 <= len(fatbin):
        magic, _, header, size = struct.unpack_from("<IHHQ", fatbin, off)
        if magic != FATBIN_MAGIC:
            break
        entry = off + header
        while entry < off + header + size:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", fatbin, entry)
            arch = struct.unpack_from("<I", fatbin, entry + 28)[0]
            if kind == ENTRY_ELF:
                start = entry + entry_header
                found[arch] = unpack(fatbin[start:start + payload])
            entry += entry_header + payload
        off += header + size
    return found


def nvdisasm():
    path = os.environ.get("NVDISASM") or shutil.which("nvdisasm")
    if path:
        return path
    for site in sys.path:
        hits = glob.glob(os.path.join(site, "nvidia", "cu*", "bin", "nvdisasm"))
        if hits:
            return hits[0]
    sys.exit("nvdisasm not found: set NVDISASM, or pip install nvidia-cuda-nvdisasm")


def kernels(cubin, tool):
    """{kernel symbol: [instruction text]} of one cubin."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "-c", f.name], check=True, capture_output=True,
                              text=True).stdout
    out, current = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*\.section\s+\.text\.([^,]+),", line)
        if m:
            current = out.setdefault(m.group(1), [])
            continue
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", line)
        if m and current is not None:
            current.append(m.group(1))
    return out


REGISTER = re.compile(r"\b(UR|R|UP|P|B)(\d+)\b")


LABEL = re.compile(r"\.L_x_\d+|__internal_\d+_")


def relabelled(instructions):
    """Labels and the numbers of internal helper functions blanked."""
    return [LABEL.sub("L", i) for i in instructions]


def canonical(instructions):
    """Registers numbered by first use, per kind; labels and the numbers of internal
    helper functions (which follow a unit's contents) blanked."""
    names = collections.defaultdict(dict)

    def rename(m):
        seen = names[m.group(1)]
        return seen.setdefault(m.group(0), f"{m.group(1)}{len(seen)}")
    return relabelled(REGISTER.sub(rename, i) for i in instructions)


def opcode(instruction):
    words = instruction.split()
    return words[1] if words[0].startswith("@") else words[0]


def objects(path):
    if os.path.isfile(path):
        return {os.path.basename(path): path}
    found = glob.glob(os.path.join(path, "CMakeFiles", "fa2_objects*.dir", "kernels", "*.o"))
    return {os.path.relpath(p, path): p for p in found}


def build_kernels(paths, match, tool):
    """{(arch, kernel symbol): [instruction text]} of every object whose path contains
    `match` (a kernel that several objects hold is taken once)."""
    found = {}
    for name in sorted(paths):
        if match not in name:
            continue
        for arch, cubin in cubins(fatbin_section(paths[name])).items():
            for k, instructions in kernels(cubin, tool).items():
                found.setdefault((arch, k), instructions)
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--match", default="", help="only objects whose path contains this")
    ap.add_argument("--ops", action="store_true", help="opcode counts of each differing kernel")
    args = ap.parse_args()
    tool = nvdisasm()
    old, new = objects(args.old), objects(args.new)
    ka = build_kernels(old, args.match, tool)
    kb = build_kernels(new, args.match, tool)
    totals = collections.Counter()
    for arch, k in sorted(set(ka) | set(kb)):
        x, y = ka.get((arch, k)), kb.get((arch, k))
        if x is None or y is None:
            verdict = "only in " + ("new" if x is None else "old")
        elif x == y:
            totals["identical"] += 1
            continue
        elif relabelled(x) == relabelled(y):
            verdict = "relabelled"
        elif canonical(x) == canonical(y):
            verdict = "renamed"
        else:
            verdict = f"different ({len(x)} -> {len(y)} instructions)"
        totals[" ".join(verdict.split()[:2]) if verdict.startswith("only") else
               verdict.split()[0]] += 1
        print(f"sm_{arch} {k}: {verdict}")
        if args.ops and x and y and verdict.startswith("different"):
            ca = collections.Counter(map(opcode, x))
            cb = collections.Counter(map(opcode, y))
            for op in sorted(set(ca) | set(cb), key=lambda o: -abs(ca[o] - cb[o])):
                if ca[op] != cb[op]:
                    print(f"    {op:28s} {ca[op]:6d} {cb[op]:6d}")
    print(", ".join(f"{n} {v}" for n, v in sorted(totals.items())) or "no kernels compared")


if __name__ == "__main__":
    main()
