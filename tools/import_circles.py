#!/usr/bin/env python3
"""Import circles between the modules of each crate of the workspace.

A module is one source file (`foo.rs` and `foo/mod.rs` are module `foo`). Module A uses
module B when A's code (comments and the trailing `#[cfg(test)] mod tests` left out) names a
path into B: `use crate::b::...`, `crate::b::f(...)`, `super::...`, `self::...`, grouped
`use crate::{b::X, c}`. A path names the deepest module it reaches (`crate::compile::bound::x`
is module `compile::bound`; `crate::compile::Graph` is `compile`, whose file re-exports it).

A circle is a set of modules each reachable from every other (a strongly connected component
of more than one module): no module of it can be read, tested or moved without the others.
Prints each circle with one use per arrow that closes it, and exits 1 when there is any.

Usage: tools/import_circles.py [CRATE_SRC_DIR ...]   (default: crates/*/src)
"""

import re
import sys
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments(text: str) -> str:
    """The code without comments and string contents (so paths in docs and messages do not
    count)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == '"' or (c == "r" and re.match(r'r#*"', text[i:i + 8])):
            m = re.match(r'r(#*)"', text[i:i + 8])
            if c == "r" and m and (i == 0 or not re.match(r"[A-Za-z0-9_]", text[i - 1])):
                end = '"' + m.group(1)
                j = text.find(end, i + len(m.group(0)))
                i = n if j < 0 else j + len(end)
                out.append('""')
            elif c == '"':
                j = i + 1
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                i = j + 1
                out.append('""')
            else:
                out.append(c)
                i += 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:i + 4])
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def without_tests(code: str) -> str:
    """The code before a trailing `#[cfg(test)] mod tests {`."""
    m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([a-z]+\))?\s+)?mod\s+tests\s*\{", code)
    return code[: m.start()] if m else code


def module_of(src: Path, path: Path) -> tuple:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def group_items(body: str):
    """The paths of a `{a::b, c::{d, e}, f}` group, each as a list of segments."""
    items, depth, cur = [], 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    paths = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        head = item.split("{", 1)[0]
        segs = [s for s in head.split("::") if s.strip()]
        paths.append([s.strip().split(" as ")[0].strip() for s in segs])
    return paths


def inline_depths(code: str):
    """For each inline `mod name { ... }` of `code`, its span: a path inside one is written
    one module deeper than the file's (its `super` is the file's module)."""
    spans = []
    for m in re.finditer(r"\bmod\s+" + IDENT + r"\s*\{", code):
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        spans.append((m.start(), j))
    return lambda at: sum(1 for a, b in spans if a <= at < b)


def paths_in(code: str):
    """(prefix, segments) for every crate/super/self path in `code`, `super` written inside
    inline modules counted from the file's module."""
    depth_at = inline_depths(code)
    found = []
    for m in re.finditer(r"\b(crate|super|self)((?:::" + IDENT + r")*)::\{", code):
        start = m.end()
        depth, j = 1, start
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        base = [s for s in m.group(2).split("::") if s]
        for p in group_items(code[start:j - 1]):
            found.append(inline(m.group(1), base + p, depth_at(m.start())))
    for m in re.finditer(r"\b(crate|super|self)((?:::" + IDENT + r")+)", code):
        segs = [s for s in m.group(2).split("::") if s]
        found.append(inline(m.group(1), segs, depth_at(m.start())))
    return found


def inline(prefix: str, segs: list, depth: int):
    """A path written `depth` inline modules deep, as if written in the file's module."""
    if depth == 0 or prefix == "crate":
        return prefix, segs
    if prefix == "self":
        return "self", []
    ups = 1
    while segs and segs[0] == "super":
        ups, segs = ups + 1, segs[1:]
    if ups <= depth:
        return "self", segs
    return "super", ["super"] * (ups - depth - 1) + segs


def reexports(code: str):
    """(name, prefix, segments) for every item `code` re-exports with `pub use` (any
    visibility), the segments ending at the item's original name."""
    out = []
    for m in re.finditer(r"\bpub(?:\([a-z]+\))?\s+use\s+([^;]+);", code):
        body = m.group(1).strip()
        g = re.match(r"((?:" + IDENT + r"::)*)\{(.*)\}$", body, re.S)
        if g:
            base = [x for x in g.group(1).split("::") if x]
            items = [base + it for it in group_items(g.group(2))]
            names = [re.split(r"\s+as\s+", x.split("{")[0].split("::")[-1].strip()) for x in
                     g.group(2).split(",") if x.strip() and "{" not in x]
        else:
            items = [[x.strip() for x in body.split(" as ")[0].split("::")]]
            alias = body.split(" as ")[-1].strip() if " as " in body else items[0][-1]
            names = [[items[0][-1], alias]]
        for path in items:
            if len(path) < 2 or path[-1] in ("*", "self"):
                continue
            alias = path[-1]
            for n in names:
                if isinstance(n, list) and n[0].strip() == path[-1] and len(n) == 2:
                    alias = n[1].strip()
            out.append((alias, path[0], path[1:]))
    return out


def resolve(module: tuple, prefix: str, segs: list, modules: set, exported=None,
            depth=0):
    """The module that defines what path `prefix::segs`, written in `module`, names: the
    deepest module the path reaches, or, where that module only re-exports the item, the
    module the re-export names; `None` for another crate's item."""
    if prefix == "<extern>":
        return None  # another crate's item
    if prefix == "crate":
        base = ()
    elif prefix == "self":
        base = module
    elif prefix == "super":
        base = module[:-1]
        while segs and segs[0] == "super":
            base, segs = base[:-1], segs[1:]
    else:
        # A path starting at a child module of `module`.
        base, segs = module, [prefix] + segs
    best, rest = base, segs
    for k in range(1, len(segs) + 1):
        cand = base + tuple(segs[:k])
        if cand not in modules:
            break
        best, rest = cand, segs[k:]
    if exported and rest and depth < 8 and (best, rest[0]) in exported:
        prefix2, segs2 = exported[(best, rest[0])]
        return resolve(best, prefix2, list(segs2), modules, exported, depth + 1)
    return best


def circles(edges: dict):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check(src: Path) -> int:
    files = {module_of(src, p): p for p in sorted(src.rglob("*.rs"))}
    modules = set(files)
    codes = {m: without_tests(strip_comments(p.read_text())) for m, p in files.items()}
    exported = {}
    for module, code in codes.items():
        for alias, prefix, segs in reexports(code):
            if prefix not in ("crate", "super", "self") and module + (prefix,) not in modules:
                prefix, segs = "<extern>", []  # another crate's item: no module of this one
            exported[(module, alias)] = (prefix, segs)
    # `#[macro_export]` macros are named at the crate root but live where they are defined.
    for module, code in codes.items():
        for m in re.finditer(r"macro_rules!\s*(" + IDENT + ")", code):
            exported.setdefault(((), m.group(1)), ("crate", list(module) + ["<macro>"]))
    edges = {}
    for module, path in files.items():
        code = codes[module]
        uses = paths_in(code)
        children = {m[-1] for m in modules if len(m) == len(module) + 1 and m[:-1] == module}
        for child in sorted(children):
            for m in re.finditer(r"(?<![:\w])" + child + r"((?:::" + IDENT + r")+)", code):
                uses.append((child, [s for s in m.group(1).split("::") if s]))
        edges.setdefault(module, {})
        for prefix, segs in uses:
            if any(s in ("*",) for s in segs):
                segs = [s for s in segs if s != "*"]
            target = resolve(module, prefix, list(segs), modules, exported)
            if target is not None and target != module:
                why = f"{path}: {'::'.join([prefix] + segs)}"
                edges[module].setdefault(target, why)
    found = circles(edges)

    def name(m):
        return "::".join(m) or "(crate root)"

    for comp in found:
        members = set(comp)
        print(f"{src}: circle of {len(comp)} modules: {', '.join(name(m) for m in comp)}")
        for a in comp:
            for b, why in sorted(edges[a].items()):
                if b in members:
                    print(f"    {name(a)} -> {name(b)}  ({why})")
    return len(found)


def main() -> int:
    roots = [Path(a) for a in sys.argv[1:]] or sorted(Path("crates").glob("*/src"))
    total = sum(check(r) for r in roots)
    if total:
        print(f"{total} import circle(s)")
        return 1
    print(f"no import circle in {len(roots)} crate(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
