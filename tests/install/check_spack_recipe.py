#!/usr/bin/python3
"""Keeps the Spack recipe (spack/packages/trident/package.py) in step with what CMake looks for.

usage: /usr/bin/python3 tests/install/check_spack_recipe.py [SOURCE_DIR]   (default: this repository)

No Spack needed: the recipe is read with Python's ast (its depends_on, variant and cmake_args
calls), the CMake files with a small parser that knows each call's enclosing if()/else() branches.
Checks, each printed as one line (exit status: the number of failed checks):
  - every find_package / find_path / find_library of the build is a known dependency (the table
    below), so a new one cannot be added without deciding its Spack package;
  - the recipe depends on it whenever CMake looks for it: the depends_on's when= variants are
    implied by the CMake branch (TRIDENT_BUILD_TESTS -> +tests, NOT TRIDENT_HAVE_CUDA -> ~cuda, ...);
  - no depends_on that CMake never looks for, nor one pulled in where CMake does not need it;
  - minimum versions: find_package(X <version>) and cmake_minimum_required against @<version>:,
    and Boost components and a parallel HDF5 against the spec's variants;
  - every CMake option the recipe sets exists in the CMake files, and the recipe has the variants
    the build needs (cuda and cuda_arch from CudaPackage, nccl, tests, benchmarks).
"""
import ast
import os
import re
import sys

# CMake dependency -> Spack package. find_package names, and the file names of find_path/find_library.
CMAKE_TO_SPACK = {
    "MPI": "mpi", "HDF5": "hdf5", "Kokkos": "kokkos", "KokkosKernels": "kokkos-kernels", "Boost": "boost",
    "GTest": "googletest", "benchmark": "benchmark", "CUDAToolkit": "cuda",
    "Random123/philox.h": "random123", "xxhash.h": "xxhash", "xxhash": "xxhash",
    "sentencepiece_trainer.h": "sentencepiece", "sentencepiece": "sentencepiece",
    "sentencepiece_train": "sentencepiece", "nccl.h": "nccl", "nccl": "nccl", "dnnl": "onednn",
    # The KokkosKernels library when it exports no target (Debian: inside Trilinos).
    "trilinos_kokkoskernels": "kokkos-kernels", "kokkoskernels": "kokkos-kernels",
}
# Looked for but not a dependency, with the reason.
NOT_DEPENDENCIES = {"Git": "optional (QUIET): the commit in `trident --version`",
                    "Threads": "the C library's POSIX threads (the offload I/O thread), no Spack package",
                    "OpenCL": "QUIET, only to tell whether a oneDNN built with its OpenCL GPU runtime (Debian's) "
                              "can be loaded; Spack's onednn brings what it needs"}
# Dependencies of the recipe that no find_* call names.
BUILD_TOOLS = {"cmake": "cmake_minimum_required"}
# CMake variables of an if() -> Spack variant.
CONDITION_VARIANTS = {"TRIDENT_BUILD_TESTS": "tests", "TRIDENT_BUILD_BENCHMARKS": "benchmarks",
                      "TRIDENT_HAVE_CUDA": "cuda", "Kokkos_ENABLE_CUDA": "cuda", "TRIDENT_ENABLE_NCCL": "nccl",
                      "TRIDENT_ENABLE_ONEDNN": "onednn"}
REQUIRED_VARIANTS = {"cuda", "cuda_arch", "nccl", "tests", "benchmarks"}
# CMake's own variables the recipe may set.
CMAKE_BUILTIN_OPTIONS = {"CMAKE_CXX_COMPILER", "CMAKE_CUDA_ARCHITECTURES", "CMAKE_BUILD_TYPE"}

failed = 0


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failed += 1


# ---------------------------------------------------------------- CMake
def cmake_calls(text):
    """(command, arguments) of every command invocation of a CMake file, in order. A small scanner:
    quoted arguments (with escapes), # line comments and #[[ ]] bracket comments are honoured, so a
    parenthesis or a # inside a string (a generated header's text) does not confuse it."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            if text.startswith("#[[", i):
                j = text.find("]]", i)
                i = n if j < 0 else j + 2
            else:
                j = text.find("\n", i)
                i = n if j < 0 else j
            continue
        m = re.compile(r"[A-Za-z_][A-Za-z0-9_]*[ \t]*\(").match(text, i)
        if not m or (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")):
            i += 1
            continue
        cmd = m.group(0).rstrip("( \t").lower()
        j, depth, args, in_str = m.end(), 1, [], False
        while j < n and depth:
            ch = text[j]
            if in_str:
                if ch == "\\":
                    args.append(text[j:j + 2])
                    j += 2
                    continue
                if ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == "#":
                k = text.find("\n", j)
                j = n if k < 0 else k
                continue
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if not depth:
                    break
            args.append(ch)
            j += 1
        out.append((cmd, "".join(args)))
        i = j + 1
    return out


def condition_variants(cond, negate):
    """The variant tokens ('+tests', '~cuda') an if() condition implies; other variables say nothing."""
    tokens = set()
    words = cond.split()
    if len(words) == 2 and words[0] == "NOT" and words[1] in CONDITION_VARIANTS:
        tokens.add(("~" if not negate else "+") + CONDITION_VARIANTS[words[1]])
    elif len(words) == 1 and words[0] in CONDITION_VARIANTS:
        tokens.add(("+" if not negate else "~") + CONDITION_VARIANTS[words[0]])
    elif not negate:  # a conjunction: each plain or NOT-ed known variable
        for k, w in enumerate(words):
            if w in CONDITION_VARIANTS and (k == 0 or words[k - 1] in ("AND", "(")):
                tokens.add("+" + CONDITION_VARIANTS[w])
            if w == "NOT" and k + 1 < len(words) and words[k + 1] in CONDITION_VARIANTS:
                tokens.add("~" + CONDITION_VARIANTS[words[k + 1]])
    return tokens


def cmake_finds(src):
    """[(dependency name, version or None, components, variant tokens, file)] and the set of options."""
    files = []
    for root, dirs, names in os.walk(src):
        dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("build") and d != "spack"]
        files += [os.path.join(root, n) for n in names if n == "CMakeLists.txt" or n.endswith(".cmake")]
    finds, options, cmake_min = [], set(), None
    for path in sorted(files):
        rel = os.path.relpath(path, src)
        stack = []  # (condition, in_else)
        for cmd, args in cmake_calls(open(path).read()):
            words = args.split()
            if cmd == "if":
                stack.append([args.strip(), False])
            elif cmd in ("elseif", "else") and stack:
                stack[-1][1] = True  # the branch where the if() condition is false
                if cmd == "elseif":
                    stack[-1] = [args.strip(), False]
            elif cmd == "endif" and stack:
                stack.pop()
            elif cmd in ("function", "macro"):
                stack.append(["", False])
            elif cmd in ("endfunction", "endmacro") and stack:
                stack.pop()
            tokens = set()
            for cond, in_else in stack:
                tokens |= condition_variants(cond, in_else)
            if cmd == "find_package" and words:
                version = words[1] if len(words) > 1 and re.fullmatch(r"[0-9][0-9.]*", words[1]) else None
                comps = words[words.index("COMPONENTS") + 1:] if "COMPONENTS" in words else []
                comps = [c for c in comps if c.isidentifier() and c.upper() != c]  # lower-case component names
                finds.append((words[0], version, comps, tokens, rel))
            elif cmd == "find_path" and len(words) > 1:
                finds.append((words[1], None, [], tokens, rel))
            elif cmd == "find_library" and "NAMES" in words:
                for name in words[words.index("NAMES") + 1:]:
                    if name.isupper() or name.startswith("$"):
                        break
                    finds.append((name, None, [], tokens, rel))
            elif cmd == "option" and words:
                options.add(words[0])
            elif cmd == "set" and "CACHE" in words:
                options.add(words[0])
            elif cmd == "cmake_minimum_required" and "VERSION" in words:
                cmake_min = words[words.index("VERSION") + 1].split("...")[0]
    return finds, options, cmake_min


# ---------------------------------------------------------------- the recipe
def literal(node):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.JoinedStr):  # f"kokkos+cuda cuda_arch={_arch}": the constant parts
        return "".join(v.value if isinstance(v, ast.Constant) else "*" for v in node.values)
    return None


def parse_recipe(path):
    tree = ast.parse(open(path).read(), path)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in cls.bases}
    deps, variants, defines = [], {}, []
    for node in ast.walk(cls):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        kw = {k.arg: literal(k.value) for k in node.keywords}
        if fn == "depends_on" and node.args:
            deps.append((literal(node.args[0]), kw.get("when") or "", kw.get("type")))
        elif fn == "variant" and node.args:
            variants[literal(node.args[0])] = kw.get("when") or ""
        elif fn in ("define", "define_from_variant") and node.args:
            defines.append(literal(node.args[0]))
    return bases, deps, variants, defines


def spec_name(spec):
    return re.match(r"[A-Za-z0-9_-]+", spec).group(0)


def spec_version(spec):
    m = re.search(r"@([0-9][0-9.]*):", spec)
    return m.group(1) if m else None


def variant_tokens(when):
    """'+cuda cuda_arch=90' -> {'+cuda'}; '~cuda' -> {'~cuda'}; '+cuda+nccl' -> both."""
    return set(re.findall(r"[+~][A-Za-z_][A-Za-z0-9_]*", when))


def closure(tokens, variants):
    """Tokens plus what they imply: a variant declared with when='+cuda' exists only with +cuda."""
    out = set(tokens)
    changed = True
    while changed:
        changed = False
        for t in list(out):
            if t.startswith("+") and variants.get(t[1:]):
                new = variant_tokens(variants[t[1:]]) - out
                if new:
                    out |= new
                    changed = True
    return out


def version_tuple(v):
    return tuple(int(x) for x in v.split("."))


def main():
    src = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    recipe = os.path.join(src, "spack", "packages", "trident", "package.py")
    bases, deps, variants, defines = parse_recipe(recipe)
    finds, options, cmake_min = cmake_finds(src)
    if "CudaPackage" in bases:  # CudaPackage adds the cuda and cuda_arch variants and depends_on("cuda", when="+cuda")
        variants.setdefault("cuda", "")
        variants.setdefault("cuda_arch", "+cuda")
        deps.append(("cuda", "+cuda", None))
    print(f"recipe: {os.path.relpath(recipe, src)}: {len(deps)} depends_on, variants {sorted(variants)}")
    print(f"CMake: {len(finds)} find_* calls; options {sorted(o for o in options if o.startswith('TRIDENT_'))}")
    check(len(finds) >= 8, f"the CMake parser found the dependency calls ({len(finds)})")

    # Every find_* is a known dependency (or a declared non-dependency).
    wanted = []  # (spack name, tokens, cmake name, version, components, file)
    for name, version, comps, tokens, rel in finds:
        if name in NOT_DEPENDENCIES:
            continue
        check(name in CMAKE_TO_SPACK, f"{rel}: '{name}' has a Spack package in the table of this test")
        if name in CMAKE_TO_SPACK:
            wanted.append((CMAKE_TO_SPACK[name], tokens, name, version, comps, rel))

    # The recipe has it whenever CMake looks for it.
    for spack, tokens, name, version, comps, rel in wanted:
        cond = closure(tokens, variants)
        active = [d for d in deps if spec_name(d[0]) == spack and variant_tokens(d[1]) <= cond]
        where = " ".join(sorted(tokens)) or "always"
        check(bool(active), f"{rel}: {name} ({where}) -> depends_on('{spack}') active then")
        if version:
            have = [spec_version(d[0]) for d in active if spec_version(d[0])]
            check(any(version_tuple(v) >= version_tuple(version) for v in have),
                  f"{rel}: find_package({name} {version}) -> {spack}@{version}: (recipe: {have or 'no version'})")
        for c in comps:
            check(any(f"+{c}" in d[0] for d in active), f"{rel}: {name} component {c} -> {spack}+{c}")

    # No dependency CMake does not look for, nor one pulled in where CMake does not need it.
    for spec, when, _type in deps:
        name = spec_name(spec)
        if name in BUILD_TOOLS:
            continue
        uses = [w for w in wanted if w[0] == name]
        check(bool(uses), f"depends_on('{spec}') is looked for by CMake")
        if uses:
            cond = closure(variant_tokens(when), variants)
            check(any(closure(w[1], variants) <= cond for w in uses),
                  f"depends_on('{spec}', when='{when}'): CMake looks for it then "
                  f"(CMake: {[' '.join(sorted(w[1])) or 'always' for w in uses]})")

    # Versions and variants that CMake insists on.
    cm = [spec_version(d[0]) for d in deps if spec_name(d[0]) == "cmake"]
    check(bool(cm) and cmake_min is not None and cm[0] == cmake_min,
          f"cmake_minimum_required({cmake_min}) -> depends_on('cmake@{cmake_min}:') (recipe: {cm})")
    parallel_hdf5 = any("HDF5_IS_PARALLEL" in open(os.path.join(src, "cmake", f)).read()
                        for f in os.listdir(os.path.join(src, "cmake")) if f.endswith(".cmake"))
    if parallel_hdf5:
        check(all("+mpi" in d[0] for d in deps if spec_name(d[0]) == "hdf5"),
              "CMake insists on a parallel HDF5 -> every hdf5 dependency has +mpi")

    # Options and variants.
    for name in defines:
        check(name in options or name in CMAKE_BUILTIN_OPTIONS, f"cmake_args sets {name}, which CMake declares")
    for v in sorted(REQUIRED_VARIANTS):
        check(v in variants, f"variant '{v}'")
    print(f"{failed} failed")
    return failed


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0)
    sys.exit(main())
