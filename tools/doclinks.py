#!/usr/bin/env python3
"""Every link in the repository's Markdown files stays inside the repository
and resolves.

Usage: tools/doclinks.py [ROOT]   (default: the repository this file is in)

Checks every `*.md` file git tracks (or, outside a git checkout, every `*.md`
under ROOT): each inline link `[text](target)` and each reference definition
`[label]: target` whose target is not a URL (`scheme:`) nor a bare anchor
(`#...`) must name a file or folder that exists, relative to the Markdown
file, and must not leave the repository (an absolute path, or `..` past the
root). An anchor (`file.md#section`, or `#section` within the file) must name
a heading of that Markdown file, slugged as GitHub does (lower case, punctuation
dropped, spaces to hyphens, `-1`, `-2` … for repeats). Links inside code
(fenced blocks, `inline code`) are not links and are skipped.

Prints each broken link as `file:line: target (reason)` and a last line
`N broken links`; exits 1 when N > 0. Why: the docs are read from a clone (and
rendered by a forge), where a link to a moved file or to a path on the author's
machine is a dead end.
"""

import os
import re
import subprocess
import sys

INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")


def markdown_files(root):
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "-z", "--cached", "--others",
             "--exclude-standard", "*.md"],
            check=True, capture_output=True, text=True,
        ).stdout
        return sorted(p for p in out.split("\0") if p)
    except (OSError, subprocess.CalledProcessError):
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in (".git", "target")]
            for name in filenames:
                if name.endswith(".md"):
                    found.append(os.path.relpath(os.path.join(dirpath, name), root))
        return sorted(found)


def links(text):
    """(line number, target) for every link outside code."""
    in_fence = None
    for number, line in enumerate(text.splitlines(), start=1):
        fence = FENCE.match(line)
        if fence:
            if in_fence is None:
                in_fence = fence.group(1)
            elif fence.group(1) == in_fence:
                in_fence = None
            continue
        if in_fence is not None:
            continue
        line = INLINE_CODE.sub("", line)
        for match in INLINE.finditer(line):
            yield number, match.group(1)
        reference = REFERENCE.match(line)
        if reference:
            yield number, reference.group(1)


HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    """Every anchor the Markdown file at `path` defines."""
    if path not in _anchors:
        found, seen, in_fence = set(), {}, None
        with open(path, encoding="utf-8") as f:
            for line in f:
                fence = FENCE.match(line)
                if fence:
                    if in_fence is None:
                        in_fence = fence.group(1)
                    elif fence.group(1) == in_fence:
                        in_fence = None
                    continue
                heading = None if in_fence else HEADING.match(line)
                if heading:
                    base = slug(heading.group(2))
                    n = seen.get(base, 0)
                    seen[base] = n + 1
                    found.add(base if n == 0 else f"{base}-{n}")
                for name in re.findall(r'<a\s+(?:name|id)="([^"]+)"', line):
                    found.add(name)
        _anchors[path] = found
    return _anchors[path]


def problem(root, md_file, target):
    """Why `target`, linked from `md_file`, is broken; None if it is not."""
    if SCHEME.match(target):
        return None
    path, _, anchor = target.partition("#")
    path = path.split("?", 1)[0]
    if path.startswith("/"):
        return "absolute path: points outside the repository"
    if path:
        resolved = os.path.normpath(os.path.join(root, os.path.dirname(md_file), path))
    else:
        resolved = os.path.join(root, md_file)
    if os.path.relpath(resolved, root).startswith(".."):
        return "leaves the repository"
    if not os.path.exists(resolved):
        return "no such file"
    if anchor and resolved.endswith(".md") and os.path.isfile(resolved):
        if anchor.lower() not in anchors(resolved):
            return "no such heading"
    return None


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, ".."))
    broken = 0
    for md_file in markdown_files(root):
        with open(os.path.join(root, md_file), encoding="utf-8") as f:
            text = f.read()
        for number, target in links(text):
            reason = problem(root, md_file, target)
            if reason:
                broken += 1
                print(f"{md_file}:{number}: {target} ({reason})")
    print(f"{broken} broken links")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
