#!/usr/bin/env python3
"""Independent reference for trident's GPT-2 BPE encoder, used by test_gpt2_bpe.cpp.

Standard library only (no `regex` module): GPT-2's pre-tokenisation pattern

    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+

is evaluated the way a backtracking regex engine does findall(): at each position the
alternatives are tried in order and the first that matches wins. \\p{L} / \\p{N} come from
unicodedata.category; \\s is the Unicode White_Space property, written out below from
PropList.txt (the C++ side derives it from general categories instead).

Input bytes are decoded with "surrogateescape", so every invalid byte becomes one lone
surrogate (category Cs, i.e. "other") and turns back into its byte when the pieces are
encoded again: this is the invalid-UTF-8 rule documented in csrc/data/gpt2_bpe.h.

Usage: tokenizer_reference.py VOCAB_JSON MERGES_TXT CASES_FILE
CASES_FILE holds one test string per line, hex-encoded UTF-8 bytes. For each line one
output line: the ids separated by spaces, or "SKIP" when the string holds a code point
this Python's Unicode database does not know (its version may differ from utf8proc's).
"""
import json
import sys
import unicodedata

# PropList.txt, White_Space (unchanged since Unicode 6.3).
WHITE_SPACE = set([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680] +
                  list(range(0x2000, 0x200B)) + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000])


def is_space(ch):
    return ord(ch) in WHITE_SPACE


def is_letter(ch):
    return unicodedata.category(ch)[0] == "L"


def is_number(ch):
    return unicodedata.category(ch)[0] == "N"


def is_other(ch):
    return not (is_space(ch) or is_letter(ch) or is_number(ch))


def run_of(text, i, pred):
    j = i
    while j < len(text) and pred(text[j]):
        j += 1
    return j


def alt_contraction(text, i):
    for suffix in ("s", "t", "re", "ve", "m", "ll", "d"):
        if text.startswith("'" + suffix, i):
            return i + 1 + len(suffix)
    return None


def alt_optional_space_then(pred):
    def match(text, i):
        # " ?X+": the greedy optional space first, then without it.
        for start in ((i + 1, i) if text.startswith(" ", i) else (i,)):
            j = run_of(text, start, pred)
            if j > start:
                return j
        return None
    return match


def alt_space_not_followed_by_nonspace(text, i):
    j = run_of(text, i, is_space)
    # Backtrack from the longest run until (?!\S) holds.
    for end in range(j, i, -1):
        if end == len(text) or is_space(text[end]):
            return end
    return None


def alt_space(text, i):
    j = run_of(text, i, is_space)
    return j if j > i else None


ALTERNATIVES = [alt_contraction, alt_optional_space_then(is_letter),
                alt_optional_space_then(is_number), alt_optional_space_then(is_other),
                alt_space_not_followed_by_nonspace, alt_space]


def pretokenize(text):
    pieces, i = [], 0
    while i < len(text):
        for alt in ALTERNATIVES:
            end = alt(text, i)
            if end is not None:
                break
        assert end is not None and end > i, (text, i)
        pieces.append(text[i:end])
        i = end
    return pieces


def byte_to_unicode():
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
                 list(range(0xAE, 0x100)))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


class Bpe:
    def __init__(self, vocab_path, merges_path):
        with open(vocab_path, encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(merges_path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        assert lines[0].startswith("#version")
        merges = [tuple(l.split(" ")) for l in lines[1:] if l]
        self.ranks = {pair: r for r, pair in enumerate(merges)}  # a repeated pair: last rank
        self.b2u = byte_to_unicode()

    def bpe(self, symbols):
        symbols = list(symbols)
        while len(symbols) > 1:
            pairs = set(zip(symbols, symbols[1:]))
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            merged, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == best:
                    merged.append(symbols[i] + symbols[i + 1])
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            symbols = merged
        return symbols

    def encode(self, text):
        ids = []
        for piece in pretokenize(text):
            raw = piece.encode("utf-8", "surrogateescape")
            ids.extend(self.encoder[s] for s in self.bpe(self.b2u[b] for b in raw))
        return ids


def known_to_python(text):
    # Lone surrogates stand for invalid bytes; any other Cn is unassigned here.
    return all(unicodedata.category(c) != "Cn" or 0xD800 <= ord(c) <= 0xDFFF
               for c in text if ord(c) > 0x7F)


def main():
    vocab, merges, cases = sys.argv[1:4]
    bpe = Bpe(vocab, merges)
    out = []
    with open(cases, encoding="ascii") as f:
        for line in f:
            text = bytes.fromhex(line.strip()).decode("utf-8", "surrogateescape")
            if not known_to_python(text):
                out.append("SKIP")
            else:
                out.append(" ".join(str(i) for i in bpe.encode(text)))
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
