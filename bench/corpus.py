"""The benchmark corpus: 200,000 sentences of 10 words (2,000,000 words), fixed seed.

Words are drawn from a 20,000-word vocabulary with a Zipf-like skew, as in
natural text. The file is cached under bench/results/ and reused.
"""

from __future__ import annotations

import random
from pathlib import Path

RESULTS = Path(__file__).with_name("results")


def corpus_path(sentences: int = 200_000, words_per_sentence: int = 10, seed: int = 42) -> Path:
    path = RESULTS / f"corpus-{sentences}x{words_per_sentence}-{seed}.txt"
    if path.exists():
        return path
    RESULTS.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(20_000)]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    words = rng.choices(vocab, weights, k=sentences * words_per_sentence)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as f:
        for i in range(sentences):
            f.write(" ".join(words[i * words_per_sentence : (i + 1) * words_per_sentence]))
            f.write("\n")
    tmp.rename(path)
    return path
