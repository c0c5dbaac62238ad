"""
Generates lib/unicode_tables.h: the Unicode code point ranges that lib/tokenizer.h needs to
pre-tokenize text exactly like tiktoken's GPT-2 pattern (and, at the end, the canonical
decompositions and combining classes of Unicode NFC, which Qwen2's tokenizer applies first)

    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

That pattern needs three character classes:
    \\p{L}  letters:    general categories Lu Ll Lt Lm Lo
    \\p{N}  numbers:    general categories Nd Nl No
    \\s     whitespace: the Unicode White_Space property (Rust's regex crate, Unicode mode)

Which Unicode version? tiktoken matches its pattern with Rust's fancy-regex, which hands the
classes to the regex-syntax crate, which bakes in the tables of one Unicode version. The wheel
does not say which, so we asked it: we build a throw-away tiktoken Encoding whose pattern is
just one class (say "\\p{L}") and whose vocabulary is the 256 single bytes, and encode a string
holding every code point. tiktoken drops text its pattern does not match, so what comes back is
exactly the set of code points in the class. For tiktoken 0.14.0 that set equals Unicode 16.0.0
(General_Category from unicodedata2==16.0.0) for both L and N, and differs from 15.1.0 and
17.0.0; that is regex-syntax 0.8.6+ (which moved to Unicode 16). The script repeats this probe
whenever tiktoken is importable and refuses to write tables that disagree with it.

Python's own unicodedata is Unicode 14.0 in Python 3.11, so we take the categories from the
unicodedata2 backport pinned below. White_Space is not exposed by unicodedata at all; it is a
tiny, stable list (unchanged since Unicode 6.3 removed U+180E), copied from PropList.txt.

Run from the repository root:
    pip install unicodedata2==16.0.0
    python dev/reference/gen_unicode_tables.py
"""

import os
import sys

UNICODE_VERSION = "16.0.0"
OUT_PATH = os.path.join("lib", "unicode_tables.h")

# PropList.txt, property White_Space (identical in Unicode 6.3 ... 17.0)
WHITE_SPACE = [(0x0009, 0x000D), (0x0020, 0x0020), (0x0085, 0x0085), (0x00A0, 0x00A0),
               (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F),
               (0x205F, 0x205F), (0x3000, 0x3000)]


def load_unicodedata():
    try:
        import unicodedata2
    except ImportError:
        sys.exit(f"Error: the Python package unicodedata2 is not installed\n"
                 f"HINT: pip install unicodedata2=={UNICODE_VERSION}")
    if unicodedata2.unidata_version != UNICODE_VERSION:
        sys.exit(f"Error: unicodedata2 has Unicode {unicodedata2.unidata_version}, we need {UNICODE_VERSION}\n"
                 f"HINT: pip install unicodedata2=={UNICODE_VERSION}")
    return unicodedata2


def all_code_points():
    # surrogates can never appear in valid UTF-8 (nor in a Rust &str), so they are in no class
    return [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def to_ranges(code_points):
    # sorted, merged, inclusive [lo, hi] ranges: what the C side binary-searches
    ranges = []
    for c in sorted(code_points):
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return [tuple(r) for r in ranges]


def tiktoken_probe(pattern):
    # the set of code points tiktoken's regex engine puts in `pattern` (see the docstring)
    import tiktoken
    byte_ranks = {bytes([b]): b for b in range(256)}
    enc = tiktoken.Encoding(name="unicode_probe", pat_str=pattern,
                            mergeable_ranks=byte_ranks, special_tokens={})
    everything = "".join(chr(c) for c in all_code_points())
    matched = bytes(enc.encode_ordinary(everything)).decode("utf-8")
    return {ord(ch) for ch in matched}


def c_table(name, ranges, comment):
    lines = [f"// {comment}: {len(ranges)} ranges",
             f"static const uint32_t {name}[][2] = {{"]
    row = []
    for lo, hi in ranges:
        row.append(f"{{0x{lo:X},0x{hi:X}}},")
        if len(row) == 6:
            lines.append("    " + " ".join(row))
            row = []
    if row:
        lines.append("    " + " ".join(row))
    lines.append("};")
    return "\n".join(lines)


def main():
    ud = load_unicodedata()
    letters, numbers = [], []
    for c in all_code_points():
        cat = ud.category(chr(c))
        if cat in ("Lu", "Ll", "Lt", "Lm", "Lo"):
            letters.append(c)
        elif cat in ("Nd", "Nl", "No"):
            numbers.append(c)
    spaces = [c for lo, hi in WHITE_SPACE for c in range(lo, hi + 1)]

    # cross-check against the regex engine we have to agree with, when it is installed
    try:
        import tiktoken
        probe_note = f"tiktoken {tiktoken.__version__} probe: "
        for label, pattern, ours in [("L", r"\p{L}", letters), ("N", r"\p{N}", numbers),
                                     ("White_Space", r"\s", spaces)]:
            theirs = tiktoken_probe(pattern)
            if theirs != set(ours):
                sys.exit(f"Error: {label} from unicodedata2 {UNICODE_VERSION} differs from tiktoken "
                         f"{tiktoken.__version__} in {len(theirs ^ set(ours))} code points\n"
                         f"HINT: find the Unicode version of tiktoken's regex crate and change "
                         f"UNICODE_VERSION in {sys.argv[0]}")
        probe_note += "L, N and White_Space all identical"
    except ImportError:
        probe_note = "tiktoken not installed: not cross-checked"
    print(probe_note)

    # NFC (Qwen2's tokenizer normalizes with it): canonical decompositions, one level (the C
    # side recurses), each marked whether its pair is a primary composite (NFC composes it
    # back: not a composition exclusion, not a singleton); and the canonical combining classes
    decompositions, combining = [], []
    for c in all_code_points():
        d = ud.decomposition(chr(c))
        if d and not d.startswith("<"):
            parts = [int(x, 16) for x in d.split()]
            composes = len(parts) == 2 and ud.normalize("NFC", chr(parts[0]) + chr(parts[1])) == chr(c)
            decompositions.append((c, parts[0], parts[1] if len(parts) == 2 else 0, int(composes)))
        k = ud.combining(chr(c))
        if k:
            if combining and combining[-1][1] == c - 1 and combining[-1][2] == k:
                combining[-1][1] = c
            else:
                combining.append([c, c, k])
    header = f"""// lib/unicode_tables.h: Unicode character classes for the pre-tokenizers in lib/tokenizer.h, and
// the data of Unicode NFC (Qwen2's normalizer).
// GENERATED FILE, do not edit. Regenerate from the repository root with:
//     pip install unicodedata2=={UNICODE_VERSION}
//     python dev/reference/gen_unicode_tables.py
// Unicode version {UNICODE_VERSION}: General_Category from the unicodedata2 package, White_Space
// from PropList.txt. We chose {UNICODE_VERSION} because it is what tiktoken's Rust regex
// (regex-syntax crate) uses: the generator asks tiktoken for the exact sets and refuses to
// write tables that differ. At generation time:
//     {probe_note}
// Each table is sorted, non-overlapping, inclusive [lo, hi] code point ranges.
#ifndef UNICODE_TABLES_H
#define UNICODE_TABLES_H
#include <stdint.h>
#define UNICODE_TABLES_VERSION "{UNICODE_VERSION}"
"""
    body = "\n\n".join([
        c_table("unicode_letter_ranges", to_ranges(letters), "\\p{L}: Lu Ll Lt Lm Lo"),
        c_table("unicode_number_ranges", to_ranges(numbers), "\\p{N}: Nd Nl No"),
        c_table("unicode_space_ranges", to_ranges(spaces), "\\s: White_Space"),
    ])
    rows, row = [], []
    for c, d1, d2, composes in decompositions:
        row.append(f"{{0x{c:X},0x{d1:X},0x{d2:X},{composes}}},")
        if len(row) == 5:
            rows.append("    " + " ".join(row))
            row = []
    if row:
        rows.append("    " + " ".join(row))
    nfc = "\n".join([
        "// Unicode NFC (lib/tokenizer.h's nfc_normalize, for Qwen2's tokenizer), Unicode " + UNICODE_VERSION + ".",
        f"// Canonical decompositions, one level: {{code point, first, second (0: a singleton), 1 if NFC",
        f"// composes first + second back into it}}, sorted: {len(decompositions)} entries",
        "static const uint32_t unicode_decompositions[][4] = {", *rows, "};", "",
        f"// Canonical combining classes other than 0: {{lo, hi, class}}: {len(combining)} ranges",
        "static const uint32_t unicode_combining_ranges[][3] = {"])
    row = []
    for lo, hi, k in combining:
        row.append(f"{{0x{lo:X},0x{hi:X},{k}}},")
        if len(row) == 6:
            nfc += "\n    " + " ".join(row)
            row = []
    if row:
        nfc += "\n    " + " ".join(row)
    nfc += "\n};"
    with open(OUT_PATH, "w") as f:
        f.write(header + "\n" + body + "\n\n" + nfc + "\n\n#endif // UNICODE_TABLES_H\n")
    print(f"wrote {OUT_PATH}: {len(letters)} letters, {len(numbers)} numbers, "
          f"{len(spaces)} white space code points, {len(decompositions)} decompositions, "
          f"{len(combining)} combining class ranges (Unicode {UNICODE_VERSION})")


if __name__ == "__main__":
    main()
