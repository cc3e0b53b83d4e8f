"""Deterministic prompts: short user chats and policy-like system prompts of a target length."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from bench.plan import Plan

TOPICS = ["a cat who learns to swim", "a robot in a bakery", "the moon and a lighthouse",
          "a dragon that collects spoons", "two friends building a raft", "a lost umbrella",
          "a garden on a rooftop", "a clock that runs backwards", "a fox and a violin",
          "a snowman in summer", "an old map in the attic", "a train to the sea",
          "a bee who cannot fly", "a castle made of sand", "the smallest elephant",
          "a whale who sings", "a kite caught in a tree", "the last cookie",
          "a painter and a storm", "a bicycle race in the rain", "a tiny door in the wall",
          "a frog prince who likes soup", "a squirrel's treasure", "the girl who counted stars"]

WORDS = ("the of and to in is was for on that with as by at from this it be are an or which "
         "policy customer order account support refund shipping product service request team data "
         "always never must should may please note answer question clear short polite helpful safe "
         "user assistant system message rule example format list table detail step reason check "
         "time date price number name address email phone city country language style tone").split()



def _count_tokens(model_path: Path) -> Callable[[str], int]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_path / "tokenizer.json"))
    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    return count


def system_prompt(model_path: Path, target_tokens: int, seed: int) -> tuple[str, int]:
    """Deterministic policy-like text of about ``target_tokens`` tokens (never more) for this model."""
    count = _count_tokens(model_path)
    rng = random.Random(seed)
    sentences = [f"You are assistant number {seed} of the benchmark company. Follow these rules."]
    best = (sentences[0], count(sentences[0]))
    while True:
        n = rng.randint(8, 16)
        words = [rng.choice(WORDS) for _ in range(n)]
        sentences.append(f"Rule {len(sentences)}: " + " ".join(words).capitalize() + ".")
        text = " ".join(sentences)
        ntok = count(text)
        if ntok > target_tokens:
            return best
        best = (text, ntok)


def shared_prefix_budget(model_path: Path, ctx: int, plan: Plan, users: list[str]) -> int:
    """System-prompt tokens: ~1,000, or less so that prompt + max_tokens fits the context."""
    count = _count_tokens(model_path)
    room = ctx - plan.max_tokens - max(count(u) for u in users) - 24  # 24: chat template markup
    return min(plan.shared_target, room)


def user_messages(tag: str, n: int) -> list[list[dict[str, str]]]:
    """N distinct short chats; the tag comes first so no two workloads share more than the template."""
    return [[{"role": "user", "content": f"{tag}-{i}: tell me a story about {TOPICS[i % len(TOPICS)]}."}]
            for i in range(n)]
