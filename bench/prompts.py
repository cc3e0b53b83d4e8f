"""Deterministic prompts: short user chats and policy-like system prompts of a target length."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


EDIT_SENTENCES = [
    "The weather was realy nice on the morning of the festival.", "Everyone in the vilage came to the square.",
    "A small band played old songs while the children danced.", "The baker brought fresh bread and sweet cakes.",
    "Later that afternoon, the sky turned grey and a cold wind began to blow.",
    "People hurried to find shelter under the trees and the tents.", "Nobody wanted to go home so early.",
    "The mayor gave a short speach and thanked the voluntears.", "Then the rain stoped as suddenly as it had started.",
    "The sun came out again and a rainbow apeared above the hills.", "The music started once more.",
    "By evening the square was full of light, laughter and the smell of roasted chesnuts.",
    "An old man told storys about the festivals of his youth.", "The children listened with wide eyes.",
    "When the last song ended, everyone agreed it had been the best day of the year.",
    "The next morning the streets were quiet and clean again.", "Only a few paper flags were left on the ground.",
    "A dog slept in the sun next to the fountain.", "The shopkeepers opened their doors and greeted each other.",
    "Life in the vilage went back to normal, but nobody forgot the festival.",
]
EDIT_INSTRUCTION = "Rewrite the following text, fixing only the spelling:"
REPEAT_INSTRUCTION = "Repeat after me:"  # the demo model's own copy task (tools/demo_model/data.py)


def edit_paragraph(count: Callable[[str], int], target_tokens: int, seed: int) -> str:
    """Sentences with a few misspellings, in a seeded order, of at most ``target_tokens`` tokens."""
    rng = random.Random(seed)
    order = EDIT_SENTENCES[:]
    rng.shuffle(order)
    text = order[0]
    for s in order[1:]:
        longer = f"{text} {s}"
        if count(longer) > target_tokens:
            break
        text = longer
    return text


def edit_messages(model_path: Path, tag: str, n: int, target_tokens: int,
                  instruction: str = EDIT_INSTRUCTION) -> list[list[dict[str, str]]]:
    """N distinct "edit this text" chats: the answer repeats most of the prompt's paragraph."""
    count = _count_tokens(model_path)
    seed0 = sum(map(ord, tag)) * 1000
    return [[{"role": "user", "content": f"{instruction} {tag}-{i}. "
              f"{edit_paragraph(count, target_tokens, seed0 + i)}"}] for i in range(n)]


def demo_eval_prompts(tok: Any) -> list[Any]:
    """The demo model's 33 evaluation cases as chat-templated prompts (what its draft was trained for)."""
    from tools.demo_model.evaluate import cases

    return [tok.apply_chat_template(c.messages, tools=c.tools, add_generation_prompt=True,
                                    enable_thinking=c.enable_thinking) for c in cases()]
