#!/usr/bin/env python3
"""Fails on broken links in a built HTML site (the mdBook under target/book), and on broken
includes in its Markdown sources. Python 3 standard library only.

    scripts/check-links.py BOOK_DIR [--src SRC_DIR]

In every .html file under BOOK_DIR, each relative href and src must name a file that exists
(a directory stands for its index.html), and each #fragment must be an id (or an <a name>) in
the page it points to. Links with a scheme (http:, https:, mailto:, ...) are not followed.

With --src, every {{#include PATH}} and {{#rustdoc_include PATH}} in the .md files under SRC_DIR
must name an existing file, and a PATH:ANCHOR must have both its ANCHOR and ANCHOR_END markers
in that file; and no built page may still contain an unexpanded include.
"""

import argparse
import os
import re
import sys
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

LINK_ATTRS = {"href", "src"}
INCLUDE = re.compile(r"\{\{#(include|rustdoc_include)\s+([^}\s]+)\s*\}\}")


class Page(HTMLParser):
    """The ids a page defines, and the links it makes."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []  # (line, tag, attribute, value)
        self.base = None

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"])
        if tag == "a" and values.get("name"):
            self.ids.add(values["name"])
        if tag == "base" and values.get("href") is not None:
            self.base = values["href"]
            return
        for attr in LINK_ATTRS:
            value = values.get(attr)
            if value is not None:
                self.links.append((self.getpos()[0], tag, attr, value))

    handle_startendtag = handle_starttag


def parse(path):
    page = Page()
    with open(path, encoding="utf-8") as f:
        page.feed(f.read())
    page.close()
    return page


def check_site(root):
    root = os.path.abspath(root)
    pages = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(folder, name)
                pages[path] = parse(path)
    if not pages:
        return [f"{root}: no HTML pages found"], 0

    def ids_of(path):
        if path not in pages:
            pages[path] = parse(path)
        return pages[path].ids

    problems = []
    checked = 0
    for path, page in sorted(pages.items()):
        shown = os.path.relpath(path, root)
        # A <base href> changes what relative links resolve against; "/..." is the site's root.
        here = os.path.dirname(path)
        if page.base:
            base = urlsplit(page.base)
            if base.scheme or base.netloc:
                continue  # the page's links point at another site
            folder = base.path if base.path.endswith("/") else os.path.dirname(base.path) + "/"
            if folder.startswith("/"):
                here = os.path.normpath(os.path.join(root, folder.lstrip("/")))
            else:
                here = os.path.normpath(os.path.join(here, folder))
        for line, tag, attr, value in page.links:
            parts = urlsplit(value.strip())
            if parts.scheme or parts.netloc:
                continue  # http(s), mailto, javascript, data, protocol-relative: not ours
            checked += 1
            target_path = unquote(parts.path)
            if not target_path:
                target = path
            elif target_path.startswith("/"):
                target = os.path.join(root, target_path.lstrip("/"))
            else:
                target = os.path.normpath(os.path.join(here, target_path))
            if os.path.isdir(target):
                target = os.path.join(target, "index.html")
            where = f"{shown}:{line}: <{tag} {attr}=\"{value}\">"
            if not os.path.abspath(target).startswith(root + os.sep) and os.path.abspath(target) != root:
                problems.append(f"{where} points outside the site")
                continue
            if not os.path.isfile(target):
                problems.append(f"{where}: no file {os.path.relpath(target, root)}")
                continue
            fragment = unquote(parts.fragment)
            if fragment and target.endswith(".html") and fragment not in ids_of(target):
                problems.append(
                    f"{where}: no id \"{fragment}\" in {os.path.relpath(target, root)}"
                )
    for path in sorted(pages):
        with open(path, encoding="utf-8") as f:
            text = f.read()
            if "{{#include" in text or "{{#rustdoc_include" in text:
                problems.append(f"{os.path.relpath(path, root)}: an include was not expanded")
    return problems, checked


def parse_include(spec):
    """PATH, and the anchor name or None, of an include spec (PATH, PATH:ANCHOR, PATH:N:M)."""
    path, _, rest = spec.partition(":")
    if not rest or re.fullmatch(r"\d*(:\d*)?", rest):
        return path, None
    return path, rest


def check_sources(src):
    problems = []
    count = 0
    for folder, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith(".md"):
                continue
            md = os.path.join(folder, name)
            with open(md, encoding="utf-8") as f:
                lines = f.read().splitlines()
            for number, text in enumerate(lines, 1):
                for match in INCLUDE.finditer(text):
                    count += 1
                    path, anchor = parse_include(match.group(2))
                    target = os.path.normpath(os.path.join(folder, path))
                    where = f"{md}:{number}: {match.group(0)}"
                    if not os.path.isfile(target):
                        problems.append(f"{where}: no file {target}")
                        continue
                    if anchor:
                        with open(target, encoding="utf-8") as f:
                            body = f.read()
                        start = re.search(rf"ANCHOR:\s*{re.escape(anchor)}\b", body)
                        end = re.search(rf"ANCHOR_END:\s*{re.escape(anchor)}\b", body)
                        if not start or not end or end.start() < start.start():
                            problems.append(
                                f"{where}: {target} has no ANCHOR: {anchor} ... ANCHOR_END: {anchor}"
                            )
    return problems, count


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", help="the built site, e.g. target/book")
    parser.add_argument("--src", help="the Markdown sources, e.g. docs/src")
    args = parser.parse_args()

    problems, links = check_site(args.site)
    includes = 0
    if args.src:
        more, includes = check_sources(args.src)
        problems += more
    for problem in problems:
        print(f"broken: {problem}", file=sys.stderr)
    summary = f"{links} links checked in {args.site}"
    if args.src:
        summary += f", {includes} includes in {args.src}"
    if problems:
        print(f"{summary}: {len(problems)} broken", file=sys.stderr)
        return 1
    print(f"{summary}: none broken")
    return 0


if __name__ == "__main__":
    sys.exit(main())
