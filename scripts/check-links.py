#!/usr/bin/env python3
"""Checks the documentation's links: every relative link and `#anchor` in README.md,
BENCHMARKS.md and docs/*.md must resolve.

- a relative link must name a file or directory that exists in the repository;
- an anchor (`#slug`, `file.md#slug`) must match a heading of the target file, by
  GitHub's slug rule (lower case, punctuation dropped, spaces as `-`, `-1`, `-2` … for
  repeats), or an explicit `<a id="…">`/`<a name="…">` in it;
- external links (`http:`, `https:`, `mailto:`, …) are not fetched, only skipped.

Links inside fenced code blocks and inline code spans are not links. Prints each broken
link as `file:line: link (why)` and exits 1 if there is any; stdlib only.

    python3 scripts/check-links.py [FILE...]      default: README.md BENCHMARKS.md docs/*.md
"""

import pathlib
import re
import sys
import unicodedata
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parent.parent

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
# [text](target "title") and ![alt](target); the text may hold one level of brackets.
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR = re.compile(r"<a\s+[^>]*(?:id|name)\s*=\s*\"([^\"]+)\"", re.IGNORECASE)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def lines_outside_code(text):
    """(line number, line) for each line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                continue
            yield number, line
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                and line.strip() == m.group(1):
            fence = None


def heading_text(raw):
    """A heading's text as GitHub renders it, before the slug rule."""
    text = CODE_SPAN.sub(lambda m: m.group(2), raw)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"(\*+|(?<!\w)_+|_+(?!\w))", "", text)  # emphasis markers
    return text


def slug(text):
    """GitHub's anchor for a heading: lower case; letters, marks, digits, `_`, `-` and
    spaces kept, everything else dropped; spaces become `-`."""
    out = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch in " -" or cat[0] in "LMN" or cat == "Pc":
            out.append("-" if ch == " " else ch)
    return "".join(out)


def anchors(path, cache={}):
    """Every anchor a Markdown file offers."""
    if path not in cache:
        found, seen = set(), {}
        text = path.read_text(encoding="utf-8")
        for _, line in lines_outside_code(text):
            m = HEADING.match(line)
            if m:
                base = slug(heading_text(m.group(2)))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
            found.update(HTML_ANCHOR.findall(line))
        cache[path] = found
    return cache[path]


def blocks_outside_code(text):
    """(first line number, text) for each block of lines outside fenced code, split at
    blank lines: a link's text may wrap, never across a blank line."""
    block, start, last = [], None, None
    for number, line in lines_outside_code(text):
        if not line.strip() or (last is not None and number != last + 1):
            if block:
                yield start, "\n".join(block)
            block, start = [], None
        if line.strip():
            if start is None:
                start = number
            block.append(line)
        last = number
    if block:
        yield start, "\n".join(block)


def blank_code_spans(text):
    """The text with each inline code span blanked (newlines kept, so offsets and line
    numbers hold): what is in code is not a link."""
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def links(text):
    """(line number, target) for each link outside code."""
    for start, block in blocks_outside_code(text):
        bare = blank_code_spans(block)
        for m in INLINE.finditer(bare):
            yield start + bare.count("\n", 0, m.start(1)), m.group(1)
        for offset, line in enumerate(bare.split("\n")):
            m = REFERENCE.match(line)
            if m:
                yield start + offset, m.group(1)


def check(path):
    """The broken links of one file, as `file:line: link (why)`."""
    problems = []
    rel = path.relative_to(ROOT)
    for number, target in links(path.read_text(encoding="utf-8")):
        if SCHEME.match(target) or target.startswith("//"):
            continue  # external: not fetched
        file_part, _, anchor = target.partition("#")
        file_part = urllib.parse.unquote(file_part)
        anchor = urllib.parse.unquote(anchor)
        if file_part.startswith("/"):
            dest = ROOT / file_part.lstrip("/")
        elif file_part:
            dest = (path.parent / file_part).resolve()
        else:
            dest = path
        why = None
        try:
            dest.relative_to(ROOT)
        except ValueError:
            why = "outside the repository"
        if why is None and not dest.exists():
            why = "no such file"
        elif why is None and anchor:
            if dest.suffix.lower() != ".md" or not dest.is_file():
                why = "an anchor into a file that is not Markdown"
            elif anchor not in anchors(dest):
                why = f"no heading #{anchor} in {dest.relative_to(ROOT)}"
        if why:
            problems.append(f"{rel}:{number}: {target} ({why})")
    return problems


def main(args):
    if args:
        files = [pathlib.Path(a).resolve() for a in args]
    else:
        files = [ROOT / "README.md", ROOT / "BENCHMARKS.md",
                 *sorted((ROOT / "docs").glob("*.md"))]
    problems = []
    for f in files:
        if f.exists():
            problems.extend(check(f))
        else:
            problems.append(f"{f}: no such file")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} broken link(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
