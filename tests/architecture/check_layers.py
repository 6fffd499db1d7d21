#!/usr/bin/env python3
"""Checks tenure's include arrows against the layer rule of docs/architecture.md.

Every #include in the library's sources and public headers is read; an include
that points against the rule (an upward arrow, or the client reaching into the
agent) is reported with its file and line, and the exit code is 1.

    check_layers.py [ROOT]          check the tree at ROOT (default: the checkout)
    check_layers.py --self-test     plant one upward include in a copy of a tiny
                                    tree and require that it is caught
"""
import pathlib
import re
import sys
import tempfile

# Which internal folders (src/<layer>/...) each layer may include, besides its
# own files and the public headers. The table of docs/architecture.md.
ALLOWED = {
    "net": {"net"},
    "core": {"core", "net"},
    "consul": {"consul", "core", "net"},
    "etcd": {"etcd", "core", "net"},
    "agent": {"agent", "net"},
}
# Single files a layer may include beyond its folders, with the reason.
EXCEPTIONS = {
    # The in-process connection is a consul::client transport that the agent
    # implements: the one arrow from the agent into a client layer.
    ("agent", "consul/transport.hpp"),
}
# Public headers of the agent library: no client layer may include them.
AGENT_PUBLIC = {"tenure/agent.hpp"}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def includes(path):
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        m = INCLUDE.match(line)
        if m:
            yield number, m.group(1), m.group(2)


def check(root):
    root = pathlib.Path(root)
    problems = []
    checked = 0
    # Public headers: only <...> includes, no src/ internals, and the client's
    # headers never name the agent's.
    for header in sorted((root / "include" / "tenure").rglob("*.hpp")):
        rel = header.relative_to(root / "include").as_posix()
        for number, kind, target in includes(header):
            checked += 1
            where = f"include/{rel}:{number}"
            if kind == '"':
                problems.append(f'{where}: "{target}": a public header includes only <tenure/...> and system headers')
            elif target in AGENT_PUBLIC and rel not in AGENT_PUBLIC:
                problems.append(f"{where}: <{target}>: the client's headers must not include the agent's")
    for source in sorted((root / "src").rglob("*")):
        if source.suffix not in (".cpp", ".hpp") or not source.is_file():
            continue
        rel = source.relative_to(root / "src")
        layer = rel.parts[0]
        if layer not in ALLOWED:
            problems.append(f"src/{rel.as_posix()}: not in a layer folder ({', '.join(sorted(ALLOWED))})")
            continue
        for number, kind, target in includes(source):
            checked += 1
            where = f"src/{rel.as_posix()}:{number}"
            if kind == "<":
                if target in AGENT_PUBLIC and layer != "agent":
                    problems.append(f"{where}: <{target}>: the {layer} layer is part of tenure::client, "
                                    "which never includes the agent")
                continue
            parts = target.split("/")
            if len(parts) < 2 or parts[0] not in ALLOWED:
                problems.append(f'{where}: "{target}": internal includes name their layer ("core/event.hpp")')
                continue
            if parts[0] not in ALLOWED[layer] and (layer, target) not in EXCEPTIONS:
                problems.append(f'{where}: "{target}": {layer} may include only '
                                f"{', '.join(sorted(ALLOWED[layer]))} (docs/architecture.md)")
    # What users read as examples uses the public API only.
    for folder in ("examples", "docs/guide/snippets"):
        for source in sorted((root / folder).rglob("*")):
            if source.suffix not in (".cpp", ".hpp") or not source.is_file():
                continue
            for number, kind, target in includes(source):
                checked += 1
                if kind == '"' and (target.split("/")[0] in ALLOWED or "src/" in target):
                    problems.append(f'{source.relative_to(root).as_posix()}:{number}: "{target}": '
                                    "examples use the public headers only")
    return problems, checked


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for rel, text in {
            "include/tenure/session.hpp": "#include <tenure/error.hpp>\n",
            "src/net/wire.hpp": "#include <string>\n",
            "src/core/session.cpp": '#include "core/backend.hpp"\n#include "net/wire.hpp"\n',
            "src/agent/inprocess_transport.cpp": '#include "consul/transport.hpp"\n',
        }.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        clean, _ = check(root)
        if clean:
            print("self-test: the clean tree was refused:\n  " + "\n  ".join(clean))
            return 1
        # The planted upward arrow: the backend-agnostic core reaching into Consul.
        (root / "src/core/session.cpp").write_text('#include "core/backend.hpp"\n#include "consul/lock.hpp"\n')
        planted, _ = check(root)
        if not any("src/core/session.cpp:2" in p for p in planted):
            print("self-test: the planted include src/core/session.cpp -> consul/lock.hpp was not caught")
            return 1
        print("self-test: the planted upward include was caught:\n  " + "\n  ".join(planted))
        return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
    problems, checked = check(root)
    for p in problems:
        print(p)
    print(f"{checked} includes checked, {len(problems)} against the layer rule")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
