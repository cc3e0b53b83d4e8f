"""Decode one Whisper window a bounded number of tokens at a time (mlx-audio's DecodingTask pieces).

mlx-audio's ``decode()`` runs a window's whole token loop at once (up to 224 tokens: tens of
seconds on a busy CPU). The worker's steps must stay bounded, so this drives the same parts —
the task's kv-cached Inference, its logit filters and its greedy/sampling TokenDecoder — a few
tokens per call, batch of one."""

from __future__ import annotations

import math
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_audio.stt.models.whisper.decoding import (
    DecodingOptions,
    DecodingResult,
    DecodingTask,
    compression_ratio,
)


class StepDecode:
    """One window at one temperature; ``run(n)`` samples up to N more tokens."""

    def __init__(self, model: Any, features: mx.array, options: DecodingOptions) -> None:
        self.task = task = DecodingTask(model, options)
        self.options = options
        self.features = features[None]
        self.tokens = mx.array([list(task.initial_tokens)])
        self.language = options.language or "en"
        if options.language is None:  # writes the detected language token into self.tokens
            languages, _ = task._detect_language(self.features, self.tokens)
            self.language = languages[0]
        self.sum_logprobs = mx.zeros(1)
        self.no_speech_id = task.tokenizer.no_speech  # a slow property: read once
        self.no_speech_prob = math.nan
        self.sampled = 0
        self.done = False

    def run(self, budget: int) -> bool:
        """Sample up to BUDGET tokens; True once the window's text is complete."""
        task = self.task
        while budget > 0 and not self.done:
            inputs = self.tokens if self.sampled == 0 else self.tokens[:, -1:]
            logits = task.inference.logits(inputs, self.features)
            if self.sampled == 0 and self.no_speech_id is not None:
                probs = mx.softmax(logits[:, task.sot_index], axis=-1)
                self.no_speech_prob = _scalar(probs[0, self.no_speech_id])
            last = logits[:, -1]
            for f in task.logit_filters:
                last = f.apply(last, self.tokens)
            self.tokens, completed, self.sum_logprobs = task.decoder.update(
                self.tokens, last, self.sum_logprobs)
            mx.eval(self.tokens, completed, self.sum_logprobs)
            self.sampled += 1
            budget -= 1
            if bool(completed.item()) or self.sampled >= task.sample_len or \
                    self.tokens.shape[-1] > task.n_ctx:
                self.done = True
        return self.done

    def result(self) -> DecodingResult:
        """The finished window as mlx-audio's DecodingResult (tokens up to end-of-text)."""
        task = self.task
        tokens = [int(t) for t in np.array(self.tokens[0, task.sample_begin:])]
        eot = task.tokenizer.eot
        tokens = tokens[:tokens.index(eot)] if eot in tokens else tokens
        text = task.tokenizer.decode(tokens).strip()
        return DecodingResult(audio_features=self.features[0], language=self.language,
                              tokens=tokens, text=text,
                              avg_logprob=_scalar(self.sum_logprobs[0]) / (len(tokens) + 1),
                              no_speech_prob=self.no_speech_prob,
                              temperature=self.options.temperature,
                              compression_ratio=compression_ratio(text))


def _scalar(x: mx.array) -> float:
    return float(np.array(x.astype(mx.float32)))
