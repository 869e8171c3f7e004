#!/usr/bin/env bash
# Builds the documentation and fails on anything broken in it:
#
#   1. installs mdBook when it is missing (from crates.io, with `cargo install`),
#   2. builds the book in docs/ into target/book (the English pages and, beside them, the Russian
#      ones), failing on any error or warning mdBook prints (a missing include is one),
#   3. checks every link of the built book and every include of its sources
#      (scripts/check-links.py: relative links must resolve, #fragments must exist, included
#      example files must have the anchors named),
#   4. builds the API documentation of the workspace with rustdoc warnings denied.
#
# The code on the book's pages is included from crates/ruststream-kinesis/examples, which
# `cargo test --all-features --all-targets` compiles and runs; this script checks the inclusion.
set -euo pipefail
cd "$(dirname "$0")/.."

MDBOOK_VERSION=0.4.52
CARGO_BIN="${CARGO_HOME:-$HOME/.cargo}/bin"
export PATH="$CARGO_BIN:$PATH"

if [[ "$(mdbook --version 2>/dev/null || true)" != "mdbook v$MDBOOK_VERSION" ]]; then
  echo "docs: installing mdbook $MDBOOK_VERSION (about two minutes)" >&2
  cargo install mdbook --locked --version "$MDBOOK_VERSION" \
    --no-default-features --features search
fi

echo "docs: building the book into target/book" >&2
rm -rf target/book
mkdir -p target
log=target/mdbook.log
if ! mdbook build docs >"$log" 2>&1; then
  cat "$log" >&2
  echo "docs: mdbook build failed" >&2
  exit 1
fi
if grep -E '\[(ERROR|WARN)\]' "$log" >&2; then
  echo "docs: mdbook reported the problems above (see $log)" >&2
  exit 1
fi

echo "docs: checking links and includes" >&2
python3 scripts/check-links.py target/book --src docs/src

echo "docs: building the API documentation with rustdoc warnings denied" >&2
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features

echo "docs: ok (book: target/book/index.html, API: target/doc/ruststream_kinesis/index.html)" >&2
