#!/usr/bin/python3
"""Generates src/models/mudd/unicode_tables.cpp, the Unicode data behind the GPT-NeoX tokenizer.

Run with Debian's interpreter, standard library only, from the repository root:

    /usr/bin/python3 scripts/gen_unicode_tables.py

The output is deterministic for a given Python (its `unicodedata` fixes the Unicode version, which
is written into the file). Tables:

- letters (\\p{L} = Lu|Ll|Lt|Lm|Lo) and numbers (\\p{N} = Nd|Nl|No) as inclusive code point ranges;
- whitespace (\\s) as ranges. Hugging Face `tokenizers` runs the ByteLevel regex with Oniguruma,
  whose Unicode \\s is U+0009..U+000D, U+0085 and the categories Zs, Zl, Zp; that set is exactly
  the Unicode White_Space property (what Rust's `char::is_whitespace` and the `regex`/`fancy-regex`
  \\s use), so either regex backend splits the same. Python's str.isspace() is NOT used: it also
  accepts U+001C..U+001F, which are not White_Space;
- canonical combining classes (non-zero only) as ranges;
- one level of each canonical decomposition (the code applies it recursively), Hangul syllables
  excluded because they decompose algorithmically;
- canonical composition pairs: the two-character canonical decompositions whose composite is
  stable under NFC, i.e. not a composition exclusion, singleton or non-starter decomposition.
"""
import os
import sys
import unicodedata

OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src", "models", "mudd", "unicode_tables.cpp")
MAX_CODE = 0x110000
HANGUL_FIRST, HANGUL_COUNT = 0xAC00, 11172


def code_points():
    """Every scalar value (surrogates are not characters and never reach the tokenizer)."""
    return (cp for cp in range(MAX_CODE) if not 0xD800 <= cp <= 0xDFFF)


def ranges(predicate):
    """Maximal runs [first, last] of consecutive code points where predicate holds."""
    out = []
    for cp in code_points():
        if predicate(cp):
            if out and out[-1][1] == cp - 1:
                out[-1][1] = cp
            else:
                out.append([cp, cp])
    return out


def canonical_decomposition(cp):
    """The one-level canonical mapping of cp as a list of code points, or [] when it has none."""
    mapping = unicodedata.decomposition(chr(cp))
    if not mapping or mapping.startswith("<"):
        return []
    return [int(part, 16) for part in mapping.split()]


def is_whitespace(cp):
    return cp in (0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x85) or unicodedata.category(chr(cp)) in ("Zs", "Zl", "Zp")


def emit_rows(lines, items, width=118):
    """Appends items as comma-separated rows filled up to width columns."""
    row = ""
    for item in items:
        if row and len(row) + len(item) + 2 > width:
            lines.append(row)
            row = ""
        row = (row + " " if row else "   ") + item + ","
    if row:
        lines.append(row)


def main():
    letters = ranges(lambda cp: unicodedata.category(chr(cp)).startswith("L"))
    numbers = ranges(lambda cp: unicodedata.category(chr(cp)).startswith("N"))
    spaces = ranges(is_whitespace)

    classes = []  # [first, last, ccc], consecutive code points of one non-zero class merged
    for cp in code_points():
        ccc = unicodedata.combining(chr(cp))
        if ccc == 0:
            continue
        if classes and classes[-1][1] == cp - 1 and classes[-1][2] == ccc:
            classes[-1][1] = cp
        else:
            classes.append([cp, cp, ccc])

    decompositions = []  # [code, first, second or 0], by code
    for cp in code_points():
        if HANGUL_FIRST <= cp < HANGUL_FIRST + HANGUL_COUNT:
            continue
        parts = canonical_decomposition(cp)
        if parts:
            assert len(parts) <= 2, f"U+{cp:04X} has a canonical mapping longer than two"
            decompositions.append([cp, parts[0], parts[1] if len(parts) == 2 else 0])
    # A composition is stored as the index of its decomposition, the indices sorted by (first,
    # second): the pairs are not repeated, which keeps the file small.
    compositions = []  # [first, second, index into decompositions]
    for index, (cp, first, second) in enumerate(decompositions):
        if second and unicodedata.normalize("NFC", chr(cp)) == chr(cp):
            assert unicodedata.normalize("NFC", chr(first) + chr(second)) == chr(cp)
            compositions.append([first, second, index])
    compositions.sort()

    # Below this code point every character is a starter, NFC-stable and never the second half of
    # a composition, so a string made only of such characters is already in NFC.
    second_halves = {second for _, second, _ in compositions}
    second_halves.update(range(0x1161, 0x1176))  # Hangul vowel jamo (V)
    second_halves.update(range(0x11A8, 0x11C3))  # Hangul trailing jamo (T)
    stable_below = next(cp for cp in code_points()
                        if unicodedata.combining(chr(cp)) != 0 or cp in second_halves
                        or unicodedata.normalize("NFC", chr(cp)) != chr(cp))

    version = unicodedata.unidata_version
    python = sys.version.split()[0]
    lines = [
        f"// Generated by scripts/gen_unicode_tables.py with Python {python}, unicodedata = Unicode {version}.",
        "// Do not edit: rerun the script. What each table holds and why is in the script's docstring.",
        '#include "models/mudd/unicode_tables.h"',
        "",
        "#include <algorithm>",
        "#include <iterator>",
        "",
        "namespace fca::unicode {",
        "namespace {",
        "",
        "struct CodeRange {",
        "  char32_t first, last;  // inclusive",
        "};",
        "struct ClassRange {",
        "  char32_t first, last;  // inclusive",
        "  uint8_t combining_class;",
        "};",
        "struct Decomposition {",
        "  char32_t code, first, second;  // second == 0: a singleton mapping",
        "};",
        "",
    ]

    def range_table(name, rows):
        lines.append(f"constexpr CodeRange {name}[] = {{")
        emit_rows(lines, [f"{{0x{a:X}, 0x{b:X}}}" for a, b in rows])
        lines.append("};")
        lines.append("")

    range_table("kLetters", letters)
    range_table("kNumbers", numbers)
    range_table("kWhitespace", spaces)
    lines.append("constexpr ClassRange kCombiningClasses[] = {")
    emit_rows(lines, [f"{{0x{a:X}, 0x{b:X}, {c}}}" for a, b, c in classes])
    lines.append("};")
    lines.append("")
    lines.append("constexpr Decomposition kDecompositions[] = {")
    emit_rows(lines, [f"{{0x{a:X}, 0x{b:X}, 0x{c:X}}}" for a, b, c in decompositions])
    lines.append("};")
    lines.append("")
    lines.append("constexpr uint16_t kCompositions[] = {  // indices into kDecompositions, by (first, second)")
    emit_rows(lines, [str(index) for _, _, index in compositions])
    lines.append("};")
    lines.append("")
    lines += [
        "bool in_ranges(const CodeRange* begin, const CodeRange* end, char32_t c) {",
        "  const CodeRange* it = std::upper_bound(begin, end, c, [](char32_t v, const CodeRange& r) { return v < r.first; });",
        "  return it != begin && c <= (it - 1)->last;",
        "}",
        "",
        "}  // namespace",
        "",
        f'const char* const kUnicodeVersion = "{version}";',
        f"const char32_t kNfcStableBelow = 0x{stable_below:X};",
        "",
        "bool is_letter(char32_t c) { return in_ranges(std::begin(kLetters), std::end(kLetters), c); }",
        "bool is_number(char32_t c) { return in_ranges(std::begin(kNumbers), std::end(kNumbers), c); }",
        "bool is_whitespace(char32_t c) { return in_ranges(std::begin(kWhitespace), std::end(kWhitespace), c); }",
        "",
        "uint8_t combining_class(char32_t c) {",
        "  const auto* end = std::end(kCombiningClasses);",
        "  const auto* it = std::upper_bound(std::begin(kCombiningClasses), end, c,",
        "                                    [](char32_t v, const ClassRange& r) { return v < r.first; });",
        "  return it != std::begin(kCombiningClasses) && c <= (it - 1)->last ? (it - 1)->combining_class : 0;",
        "}",
        "",
        "std::pair<char32_t, char32_t> canonical_mapping(char32_t c) {",
        "  const auto* end = std::end(kDecompositions);",
        "  const auto* it = std::lower_bound(std::begin(kDecompositions), end, c,",
        "                                    [](const Decomposition& d, char32_t v) { return d.code < v; });",
        "  if (it == end || it->code != c) return {0, 0};",
        "  return {it->first, it->second};",
        "}",
        "",
        "char32_t compose_pair(char32_t first, char32_t second) {",
        "  const auto key = std::pair{first, second};",
        "  const auto* end = std::end(kCompositions);",
        "  const auto* it = std::lower_bound(std::begin(kCompositions), end, key, [](uint16_t i, std::pair<char32_t, char32_t> v) {",
        "    return std::pair{kDecompositions[i].first, kDecompositions[i].second} < v;",
        "  });",
        "  if (it == end || kDecompositions[*it].first != first || kDecompositions[*it].second != second) return 0;",
        "  return kDecompositions[*it].code;",
        "}",
        "",
        "}  // namespace fca::unicode",
    ]
    with open(OUTPUT, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {os.path.normpath(OUTPUT)}: Unicode {version}, {len(letters)} letter, {len(numbers)} number, "
          f"{len(spaces)} whitespace, {len(classes)} class ranges, {len(decompositions)} decompositions, "
          f"{len(compositions)} compositions, NFC-stable below U+{stable_below:04X}")


if __name__ == "__main__":
    main()
