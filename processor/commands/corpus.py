"""``processor corpus``: a seeded, Zipf-distributed text corpus (the demo's and tests' input)."""

from __future__ import annotations

import argparse
import bisect
import itertools
import random
from collections.abc import Iterator
from pathlib import Path

_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "ru",
    "ta",
    "shi",
    "vo",
    "pe",
    "da",
    "en",
    "or",
    "il",
    "ba",
    "zu",
    "fa",
    "go",
    "hi",
    "jo",
    "qu",
    "se",
    "ti",
    "wa",
    "xe",
    "yo",
]


def vocabulary(size: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < size:
        word = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4)))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def lines(words: int, seed: int = 1, vocab: int = 50_000, zipf_s: float = 1.1) -> Iterator[str]:
    """Lines of 5-20 words until ``words`` words, drawn Zipf(s) from ``vocab`` words."""
    rng = random.Random(seed)
    vocabulary_ = vocabulary(vocab, seed)
    weights = list(itertools.accumulate(1 / (rank**zipf_s) for rank in range(1, vocab + 1)))
    total = weights[-1]
    left = words
    while left > 0:
        n = min(left, rng.randint(5, 20))
        picks = [vocabulary_[bisect.bisect(weights, rng.random() * total)] for _ in range(n)]
        # Some capitals and punctuation, so that lower-casing and \w splitting matter.
        if rng.random() < 0.3:
            picks[0] = picks[0].capitalize()
        yield " ".join(picks) + rng.choice(["", ".", ",", "!", " -"])
        left -= n


def write(path: Path, words: int, seed: int = 1, vocab: int = 50_000) -> int:
    count = 0
    with path.open("w", encoding="utf-8") as handle:
        for line in lines(words, seed, vocab):
            handle.write(line + "\n")
            count += 1
    return count


def add_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--words", type=int, default=1_000_000, help="words to write (default: 1,000,000)"
    )
    parser.add_argument("--seed", type=int, default=1, help="the same seed, the same corpus")
    parser.add_argument(
        "--vocab", type=int, default=50_000, help="distinct words (default: 50,000)"
    )
    parser.add_argument("out", type=Path, help="the file to write")


def run(args: argparse.Namespace) -> int:
    """``processor corpus``: the corpus into a file."""
    written = write(args.out, args.words, args.seed, args.vocab)
    print(f"wrote {args.words:,} words in {written:,} lines to {args.out}")
    return 0
