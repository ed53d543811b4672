#!/usr/bin/env bash
# Builds the API reference of the public headers (include/tensorgrad/) with
# Doxygen, from docs/Doxyfile:
#   scripts/docs.sh            HTML into build-docs/html/ (open build-docs/html/index.html)
#   scripts/docs.sh OUT_DIR    HTML into OUT_DIR/html/ (CTest's Docs.DoxygenNoWarnings
#                              writes into the build tree this way)
# Every public declaration must be documented: the script prints doxygen's
# warnings (undocumented members, malformed comments) with their count and
# exits 1 when there is any, 2 when doxygen is missing or fails.
# (scripts/docs.sh --op-list-filter FILE is doxygen's input filter for
# ops/op.h; see below.)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

# Doxygen's input filter for ops/op.h (docs/Doxyfile's FILTER_PATTERNS):
# OpKind's enumerators come from the op list by an X-macro include, which
# doxygen does not expand, so the filter writes them out in place of the
# include, each with its name in messages, its arity and the op list's
# comment above it, all on the include's line so that line numbers stay.
if [[ "${1:-}" == --op-list-filter ]]; then
  awk -v list="$root/include/tensorgrad/ops/op_list.h" '
    function op_enumerators(   line, doc, f, n, k, arity, text, all) {
      doc = ""; all = ""
      while ((getline line < list) > 0) {
        if (line ~ /^\/\/ ----/ || line ~ /^[ \t]*$/) { doc = ""; continue }
        if (line ~ /^\/\//) { sub(/^\/\/ ?/, "", line); doc = doc (doc == "" ? "" : " ") line; continue }
        if (line !~ /^TG_OP\(/) { doc = ""; continue }
        sub(/^TG_OP\(/, "", line); sub(/\)[ \t]*$/, "", line)
        n = split(line, f, /, */)
        arity = f[3] == f[4] ? (f[3] == "0" ? "no inputs" : f[3] (f[3] == "1" ? " input" : " inputs")) \
                             : f[3] " to " f[4] " inputs"
        if (f[5] == "InPlace") arity = arity ", in place"
        if (f[5] == "View") arity = arity ", a view"
        text = f[2] " (" arity ")" (doc == "" ? "" : ": " doc)
        all = all f[1] ", /**< " text " */ "
        doc = ""
      }
      close(list)
      return all
    }
    /^#define TG_OP\(/ || /^#undef TG_OP/ { print ""; next }
    /^#include "tensorgrad\/ops\/op_list\.h"/ { print op_enumerators(); next }
    { print }
  ' "$2"
  exit 0
fi

out="${1:-$root/build-docs}"

if ! command -v doxygen >/dev/null 2>&1; then
  echo "docs: doxygen not found; install it with: sudo apt-get install doxygen graphviz" >&2
  echo "      (or scripts/setup.sh --test, which installs it with the test packages)" >&2
  exit 2
fi

mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/doxygen-warnings.log"
rm -f "$log"

# Graphviz draws the class and include graphs; without it the reference is
# built without them rather than failing.
have_dot=YES
command -v dot >/dev/null 2>&1 || {
  have_dot=NO
  echo "docs: Graphviz's dot not found (apt-get install graphviz): no graphs" >&2
}

# Doxygen resolves the Doxyfile's relative paths from where it runs: the
# repository root. The output paths are overridden for OUT_DIR.
cd "$root"
if ! {
  cat docs/Doxyfile
  echo "OUTPUT_DIRECTORY = \"$out\""
  echo "WARN_LOGFILE = \"$log\""
  echo "HAVE_DOT = $have_dot"
} | doxygen - >"$out/doxygen.out" 2>&1; then
  echo "docs: doxygen failed:" >&2
  cat "$out/doxygen.out" >&2
  exit 2
fi

# Warnings go to the log (one line each, some followed by indented detail
# lines); anything doxygen printed besides (QUIET: only problems) counts too.
count=0
for f in "$log" "$out/doxygen.out"; do
  [[ -s "$f" ]] || continue
  cat "$f" >&2
  n=$(grep -c 'warning:\|error:' "$f" || true)
  ((n > 0)) || n=$(grep -c . "$f" || true)
  count=$((count + n))
done
if ((count > 0)); then
  echo "docs: $count doxygen warning(s); the reference is in $out/html/ but the headers need fixing" >&2
  exit 1
fi
echo "docs: no warnings; the reference is in $out/html/index.html"
