#!/usr/bin/env bash
# Checks every relative link in README.md, ARCHITECTURE.md and docs/*.md (or the files
# given): the file or directory it names must exist, and a #anchor must name a heading of
# the target Markdown file, by GitHub's rules (lower case, punctuation dropped, spaces to
# hyphens, -1, -2, ... for repeats). Links inside code blocks and code spans are not links;
# http(s):, mailto: and other schemes are not checked. Prints file:line: the bad link and
# why, and exits 1 when any is bad.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
    set -- README.md ARCHITECTURE.md docs/*.md
fi
exec python3 - "$@" <<'PY'
import os
import re
import sys

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) or ![alt](target), target without spaces, optional "title"
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def lines_outside_code(path):
    """(line number, text) of every line outside fenced code blocks."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            m = FENCE.match(line)
            if fence is None and m:
                fence = m.group(1)
                continue
            if fence is not None:
                if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                        and line.strip() == m.group(1):
                    fence = None
                continue
            yield number, line


def slug(text):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # keeps letters, digits, _, -, spaces
    return text.replace(" ", "-")


anchors_cache = {}


def anchors(path):
    if path not in anchors_cache:
        seen = {}
        found = set()
        for _, line in lines_outside_code(path):
            m = HEADING.match(line)
            if not m:
                continue
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        # explicit anchors: <a name="x"> or <a id="x">
        with open(path, encoding="utf-8") as f:
            found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", f.read()))
        anchors_cache[path] = found
    return anchors_cache[path]


checked = 0


def check(path):
    global checked
    bad = []
    for number, line in lines_outside_code(path):
        targets = [m.group(1) for m in LINK.finditer(CODE_SPAN.sub("", line))]
        m = REF_DEF.match(line)
        if m:
            targets.append(m.group(1))
        for target in targets:
            if not target or SCHEME.match(target) or target.startswith("//"):
                continue
            checked += 1
            file_part, _, anchor = target.partition("#")
            file_part = file_part.split("?", 1)[0]
            if file_part:
                resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                if not os.path.exists(resolved):
                    bad.append(f"{path}:{number}: {target}: {resolved} does not exist")
                    continue
            else:
                resolved = path
            if anchor:
                if os.path.isdir(resolved) or not resolved.endswith(".md"):
                    bad.append(f"{path}:{number}: {target}: an anchor into {resolved}, which is not a Markdown file")
                elif anchor not in anchors(resolved):
                    bad.append(f"{path}:{number}: {target}: no heading of {resolved} has the anchor #{anchor}")
    return bad


problems = []
count = 0
for path in sys.argv[1:]:
    if not os.path.isfile(path):
        problems.append(f"{path}: no such file")
        continue
    count += 1
    problems.extend(check(path))
for problem in problems:
    print(problem, file=sys.stderr)
if problems:
    print(f"check-links: {len(problems)} bad link(s)", file=sys.stderr)
    sys.exit(1)
print(f"check-links: all {checked} relative links of {count} file(s) resolve")
PY
