"""Every bound the gateway puts on a request before any of it reaches a worker, in one place."""

from __future__ import annotations

MAX_BODY_BYTES = 8 * 1024 * 1024  # larger bodies get 413 (Content-Length or counted on the wire)
BODY_READ_TIMEOUT_S = 30.0  # a body not fully received by then gets 408
# An /admin/* body is a few optional fields (a model path, a revision, timeouts); larger: 413
MAX_ADMIN_BODY_BYTES = 64 * 1024
MAX_JSON_DEPTH = 64  # nesting of arrays/objects anywhere in a body; deeper gets 400
# Strings (keys included), arrays and objects in a body; more gets 400 before it is decoded. Each
# decodes to a Python object of 50-130 bytes from as few as 3 body bytes: 8 MiB of `{},` took 40x
# its size (numbers, at most 8x, and true/false/null are not counted). A conversation filling a
# 128k-token context holds far fewer (each message costs tokens; keys and tools' schemas a few
# thousand), as do MAX_STORED_ITEMS Responses items (~12 each).
MAX_JSON_VALUES = 250_000

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1  # every integer anywhere in a body must fit int64 (the wire is msgpack)

# Input items of a stored conversation (previous_response_id's and this turn's): storing one writes
# a row per item, scattered over an index, on the store's writing thread (~75 us each, every
# key's writes wait meanwhile), and a continued chain stores them again at every turn.
# Without a bound, 100,000 empty reasoning items (a 3.5 MB body, no prompt token) held the
# store 7.5 s a turn and more each turn. Generous: a conversation filling a 128k context with
# messages of 30 tokens has about 4,000.
MAX_STORED_ITEMS = 10000
# Bytes of a stored conversation that a new turn may continue (and store again): reasoning items
# left without an assistant message after them reach no prompt, so a chain could grow 8 MiB a
# turn at one token each up to --responses-max-bytes (1 GiB), each continuation then decoding it
# all (several GB of Python objects) and its GET input_items serving 100 of its items at once.
MAX_STORED_CONVERSATION_BYTES = 64 << 20

MAX_CHOICES = 64  # prompts x n of one request: each becomes a job on the worker
# A token never stands for more than this many characters on average over a whole prompt, so a
# prompt with more characters than context_length * CHARS_PER_TOKEN cannot fit: refuse it before
# anything tokenizes it. Deliberately generous (real tokenizers average 3-5 characters a token).
CHARS_PER_TOKEN = 16

MAX_STOPS = 16  # stop strings per request (the worker re-checks the same bounds)
MAX_STOP_CHARS = 512  # characters per stop string (matching costs grow with its square)

MAX_LOGIT_BIAS = 300  # entries of logit_bias (OpenAI's limit)
LOGIT_BIAS_MAX = 100.0  # each bias lies in [-LOGIT_BIAS_MAX, LOGIT_BIAS_MAX]

# Copy of worker/serve/prompt.py ALLOWED_TEMPLATE_KWARGS (the gateway does not import worker/): keys a
# client may pass in chat_template_kwargs. Keep the two in sync; tests/gateway checks they match.
ALLOWED_TEMPLATE_KWARGS = frozenset({"enable_thinking", "thinking", "reasoning_effort",
                                     "add_generation_prompt"})
