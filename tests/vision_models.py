"""Tiny random-weight multimodal models that mlx-vlm loads offline: Qwen2-VL and Gemma 3.

Each folder gets a config, random weights (seeded), a tokenizer built from the demo model's BPE
(tools/demo_model) plus the model family's image tokens, the family's chat template and an
image-processor config sized so that an image becomes a handful of tokens. Nothing is
downloaded. `python -m tests.vision_models DEST` builds both and runs mlx_vlm.generate on each
with an image.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from worker.model.embedded import embedded_model_path

DEMO_VOCAB = 4096  # the demo tokenizer's size; the image tokens come right after it
VOCAB = 4160  # a multiple of 64 with room for them

QWEN_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
GEMMA_TOKENS = ["<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
                "<end_of_image>", "<image_soft_token>"]

QWEN_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

GEMMA_TEMPLATE = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}"
    "{%- if messages[0]['content'] is string -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- else -%}{%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}"
    "{%- endif -%}{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}"
    "{%- endif -%}{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{%- if message['content'] is string -%}{{ message['content'] | trim }}"
    "{%- else -%}{%- for item in message['content'] -%}"
    "{%- if item['type'] == 'image' -%}{{ '<start_of_image>' }}"
    "{%- elif item['type'] == 'text' -%}{{ item['text'] | trim }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}{{ '<end_of_turn>\n' }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}")


def _tokenizer(dest: Path, extra: list[str], template: str, config: dict[str, Any]) -> dict[str, int]:
    """The demo BPE plus EXTRA special tokens (ids from DEMO_VOCAB up) and TEMPLATE in DEST;
    returns the new tokens' ids. CONFIG is merged into tokenizer_config.json."""
    from tokenizers import AddedToken, Tokenizer

    src = embedded_model_path()
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    assert tok.get_vocab_size() == DEMO_VOCAB
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in extra])
    tok.save(str(dest / "tokenizer.json"))
    ids: dict[str, int] = {}
    for t in extra:
        i = tok.token_to_id(t)
        assert i is not None, t
        ids[t] = i
    assert sorted(ids.values()) == list(range(DEMO_VOCAB, DEMO_VOCAB + len(extra))), ids
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    cfg.pop("added_tokens_decoder", None)
    cfg.update({"chat_template": template, "model_max_length": 4096, **config})
    (dest / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
    (dest / "chat_template.jinja").write_text(template)
    return ids


def _instantiate(config: dict[str, Any]) -> Any:
    """The mlx-vlm model CONFIG describes, with fresh random weights (as mlx_vlm.load builds it)."""
    from mlx_vlm.utils import get_model_and_args, update_module_configs

    config = json.loads(json.dumps(config))
    model_class, _ = get_model_and_args(config=config)
    config.setdefault("text_config", {})
    config.setdefault("vision_config", {})
    model_config = model_class.ModelConfig.from_dict(config)
    model_config = update_module_configs(  # type: ignore[no-untyped-call]
        model_config, model_class, config, ["text", "vision", "perceiver", "projector", "audio"])
    return model_class.Model(model_config)


def _randomize(model: Any, seed: int) -> None:
    """Every parameter random (seeded): matrices scaled by their fan-in, vectors (norms, biases)
    around their initial value. mlx-vlm starts some at ones (Gemma 3's projection), which would
    make every image look alike; random ones make the output depend on the image."""
    import math

    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten

    mx.random.seed(seed)
    new = []
    params: list[tuple[str, Any]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    for name, value in params:
        if value.ndim >= 2:
            fan_in = math.prod(value.shape[1:])
            w = mx.random.normal(value.shape) / math.sqrt(fan_in)
        else:
            w = value + 0.1 * mx.random.normal(value.shape)
        new.append((name, w.astype(value.dtype)))
    model.update(tree_unflatten(new))


def _save(dest: Path, model: Any, config: dict[str, Any]) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten

    mx.eval(model.parameters())
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(dest / "model.safetensors"), weights)
    (dest / "config.json").write_text(json.dumps(config, indent=1))


def _fresh(dest: Path) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    return dest


def qwen2_vl(dest: Path, seed: int = 7) -> Path:
    """A 2-layer Qwen2-VL (M-RoPE text, 2-block vision tower): an image of 56x56 pixels is
    4x4 patches of 14, merged 2x2 into 4 image tokens."""
    dest = _fresh(dest)
    ids = _tokenizer(dest, QWEN_TOKENS, QWEN_TEMPLATE, {})
    config: dict[str, Any] = {
        "architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
        "vocab_size": VOCAB, "max_position_embeddings": 4096, "rope_theta": 10000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},  # head_dim 16: 8 pairs
        "tie_word_embeddings": True, "eos_token_id": 2, "pad_token_id": 0,
        "bos_token_id": None, "sliding_window": 4096, "use_sliding_window": False,
        "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "vision_config": {"model_type": "qwen2_vl", "depth": 2, "embed_dim": 32,
                          "hidden_size": 64, "num_heads": 2, "mlp_ratio": 2,
                          "patch_size": 14, "spatial_patch_size": 14, "in_channels": 3,
                          "in_chans": 3, "spatial_merge_size": 2, "temporal_patch_size": 2},
    }
    (dest / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor",
        "min_pixels": 56 * 56, "max_pixels": 112 * 112, "patch_size": 14,
        "temporal_patch_size": 2, "merge_size": 2, "do_resize": True, "do_rescale": True,
        "do_normalize": True, "do_convert_rgb": True, "rescale_factor": 1 / 255,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711]}, indent=1))
    model = _instantiate(config)
    _randomize(model, seed)
    _save(dest, model, config)
    return dest


def gemma3(dest: Path, seed: int = 11, head_dim: int = 16) -> Path:
    """A 2-layer Gemma 3 with a 1-layer SigLIP tower: a 56x56 image is 4x4 patches of 14,
    pooled to 4 image tokens. HEAD_DIM 32 makes its KV quantizable in groups of 32 (K8V4)."""
    dest = _fresh(dest)
    ids = _tokenizer(dest, GEMMA_TOKENS, GEMMA_TEMPLATE, {
        "bos_token": "<bos>", "eos_token": "<end_of_turn>", "add_bos_token": False,
        "extra_special_tokens": {"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                 "image_token": "<image_soft_token>"}})
    config: dict[str, Any] = {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "image_token_index": ids["<image_soft_token>"], "boi_token_index":
        ids["<start_of_image>"], "eoi_token_index": ids["<end_of_image>"],
        "mm_tokens_per_image": 4, "eos_token_id": [ids["<end_of_turn>"], 2],
        "bos_token_id": ids["<bos>"], "pad_token_id": 0, "vocab_size": VOCAB,
        "hidden_size": 64,
        "text_config": {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128,
                        "num_hidden_layers": 2, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "head_dim": head_dim, "vocab_size": VOCAB,
                        "query_pre_attn_scalar": head_dim, "sliding_window": 64,
                        "sliding_window_pattern": 2, "mm_tokens_per_image": 4,
                        "max_position_embeddings": 4096, "rms_norm_eps": 1e-6},
        "vision_config": {"model_type": "siglip_vision_model", "num_hidden_layers": 1,
                          "hidden_size": 32, "intermediate_size": 64,
                          "num_attention_heads": 2, "patch_size": 14, "image_size": 56,
                          "num_channels": 3, "layer_norm_eps": 1e-6},
    }
    (dest / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Gemma3ImageProcessor", "processor_class": "Gemma3Processor",
        "size": {"height": 56, "width": 56}, "do_resize": True, "do_rescale": True,
        "do_normalize": True, "do_convert_rgb": True, "rescale_factor": 1 / 255,
        "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 2,
        "do_pan_and_scan": False, "image_seq_length": 4}, indent=1))
    (dest / "processor_config.json").write_text(json.dumps({
        "processor_class": "Gemma3Processor", "image_seq_length": 4}))
    model = _instantiate(config)
    _randomize(model, seed)
    _save(dest, model, config)
    return dest


def qwen2_5_vl(dest: Path, seed: int = 13) -> Path:
    """A 2-layer Qwen2.5-VL (M-RoPE text; 2-block windowed vision tower, the last block full):
    a 56x56 image is 4 image tokens, as in qwen2_vl."""
    dest = _fresh(dest)
    ids = _tokenizer(dest, QWEN_TOKENS, QWEN_TEMPLATE, {})
    config: dict[str, Any] = {
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-6,
        "vocab_size": VOCAB, "max_position_embeddings": 4096, "rope_theta": 10000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
        "tie_word_embeddings": True, "eos_token_id": 2, "pad_token_id": 0,
        "bos_token_id": None, "sliding_window": 4096, "use_sliding_window": False,
        "image_token_id": ids["<|image_pad|>"], "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "vision_config": {"model_type": "qwen2_5_vl", "depth": 2, "hidden_size": 32,
                          "intermediate_size": 64, "out_hidden_size": 64, "num_heads": 2,
                          "patch_size": 14, "spatial_patch_size": 14, "in_channels": 3,
                          "in_chans": 3, "spatial_merge_size": 2, "temporal_patch_size": 2,
                          "window_size": 56, "fullatt_block_indexes": [1],
                          "tokens_per_second": 2},
    }
    (dest / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
        "min_pixels": 56 * 56, "max_pixels": 112 * 112, "patch_size": 14,
        "temporal_patch_size": 2, "merge_size": 2, "do_resize": True, "do_rescale": True,
        "do_normalize": True, "do_convert_rgb": True, "rescale_factor": 1 / 255,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711]}, indent=1))
    model = _instantiate(config)
    _randomize(model, seed)
    _save(dest, model, config)
    return dest


BUILDERS = {"qwen2_vl": qwen2_vl, "gemma3": gemma3}
MORE_BUILDERS = {"qwen2_5_vl": qwen2_5_vl}  # served by the vision engine; not in the groundwork tests


def generate_with_image(path: Path, image: Any, prompt: str = "What is in the image?",
                        max_tokens: int = 8) -> Any:
    """mlx_vlm.generate's greedy answer for PROMPT about IMAGE (a PIL image) on the model at
    PATH, with the model's own chat template."""
    from mlx_vlm.generate import generate
    from mlx_vlm.prompt_utils import apply_chat_template
    from mlx_vlm.utils import load

    loaded: Any = load(str(path))
    model, processor = loaded
    text = apply_chat_template(processor, model.config, prompt, num_images=1)
    assert isinstance(text, str)
    return generate(model, processor, text, image=[image], max_tokens=max_tokens,
                    temperature=0.0, verbose=False)


def reference(path: Path, messages: list[dict[str, Any]], images: list[Any],
              max_tokens: int = 8) -> tuple[list[int], list[int]]:
    """mlx-vlm's own prompt ids and greedy output ids for chat MESSAGES whose image parts are
    {"type": "image"} placeholders (the form the gateway leaves, gateway/images/intake.py),
    filled in order by IMAGES (PIL images): the reference a vision engine must match."""
    from mlx_vlm.generate import stream_generate
    from mlx_vlm.utils import load, prepare_inputs

    loaded: Any = load(str(path))
    model, processor = loaded
    # a random model may pick ids its tokenizer lacks (the embedding is larger): give them a
    # text so mlx-vlm's streaming detokenizer does not fail on them (only token ids matter here)
    tokenmap = getattr(getattr(processor, "detokenizer", None), "tokenmap", None)
    rows = int(model.language_model.model.embed_tokens.weight.shape[0])
    if isinstance(tokenmap, list) and len(tokenmap) < rows:
        tokenmap.extend(["!"] * (rows - len(tokenmap)))
    tokenizer = getattr(processor, "tokenizer", processor)  # the model's own template
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    inputs = prepare_inputs(  # type: ignore[no-untyped-call]
        processor, images=images or None, prompts=text)
    prompt_ids = [int(t) for t in inputs["input_ids"].tolist()[0]]
    by_step: dict[int, int] = {}  # the last result repeats the last step's token
    for r in stream_generate(model, processor, text, image=images or None,
                             max_tokens=max_tokens, temperature=0.0):
        if r.token is not None:
            by_step[r.generation_tokens] = int(r.token)
    return prompt_ids, [by_step[k] for k in sorted(by_step)]


def main(argv: list[str]) -> None:
    """Build both models under argv[0] and generate from each with an image."""
    from PIL import Image

    root = Path(argv[0] if argv else "/tmp/rapid-mlx-test-models")
    image = Image.new("RGB", (64, 48), (200, 30, 90))
    for name, build in BUILDERS.items():
        path = build(root / f"tiny-{name}")
        out = generate_with_image(path, image)
        print(name, path, repr(out.text), out.prompt_tokens, out.generation_tokens)


if __name__ == "__main__":
    main(sys.argv[1:])
