"""Kokoro voice packs from the places they ship, into a model folder's voices/NAME.safetensors.

Usage: ``python -m worker.kinds.tts.voices SRC DST`` adds SRC's voices to the Kokoro folder DST.
SRC is kokoro-js's npm tarball (``npm pack kokoro-js@1.2.1``: ``package/voices/NAME.bin``, 54
voices of Kokoro v1.0), a folder of such ``NAME.bin`` files (raw little-endian float32, 510 x 1 x
256), a folder of ``NAME.safetensors`` packs (mlx-audio's layout, key ``voice``) or an ``.npz`` file
(kokoro-onnx's voices-v1.0.bin is one).
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path

import numpy as np

STYLE_DIM = 256  # a pack row: 128 decoder + 128 prosody style values
MAX_LEN = 510  # one row per phoneme count


class VoiceError(ValueError):
    """A voice source that holds no usable Kokoro voice pack."""


def raw_pack(data: bytes, name: str) -> np.ndarray:
    """A kokoro-js NAME.bin's bytes as a [510, 1, 256] float32 pack."""
    if len(data) % (4 * STYLE_DIM):
        raise VoiceError(f"{name}: {len(data)} bytes is not a whole number of 256-float rows")
    return np.frombuffer(data, dtype="<f4").reshape(-1, 1, STYLE_DIM).astype(np.float32)


def read_pack_file(path: Path) -> np.ndarray:
    """One voice pack file: NAME.bin (raw float32) or NAME.safetensors (key `voice`)."""
    if path.suffix == ".bin":
        return raw_pack(path.read_bytes(), path.name)
    from safetensors.numpy import load_file

    return np.asarray(load_file(str(path))["voice"], dtype=np.float32).reshape(-1, 1, STYLE_DIM)


def _from_tarball(path: Path) -> dict[str, np.ndarray]:
    packs = {}
    with tarfile.open(path, "r:*") as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if member.isfile() and len(parts) >= 2 and parts[-2] == "voices" and \
                    member.name.endswith(".bin"):
                f = tar.extractfile(member)
                if f is not None:
                    packs[Path(member.name).stem] = raw_pack(f.read(), member.name)
    return packs


def read_voice_packs(src: Path) -> dict[str, np.ndarray]:
    """name -> [510, 1, 256] float32 pack, from any source the module docstring names."""
    if src.is_dir():
        folder = src / "voices" if (src / "voices").is_dir() else src
        files = sorted(folder.glob("*.bin")) + sorted(folder.glob("*.safetensors"))
        packs = {f.stem: read_pack_file(f) for f in files}
    elif src.name.endswith((".tgz", ".tar.gz", ".tar")):
        packs = _from_tarball(src)
    else:
        with np.load(src) as z:
            packs = {k: z[k].astype(np.float32).reshape(-1, 1, STYLE_DIM) for k in z.files}
    if not packs:
        raise VoiceError(f"{src} holds no Kokoro voice packs")
    for name, pack in packs.items():
        if pack.shape[0] < MAX_LEN:
            raise VoiceError(f"{name}: {pack.shape[0]} rows, a Kokoro voice has {MAX_LEN}")
    return packs


def write_voice_packs(packs: dict[str, np.ndarray], dst: Path) -> list[str]:
    """Write DST/voices/NAME.safetensors for each pack and list every voice in DST/config.json's
    `voices`; return that list."""
    from safetensors.numpy import save_file

    (dst / "voices").mkdir(parents=True, exist_ok=True)
    for name, pack in packs.items():
        save_file({"voice": np.ascontiguousarray(pack)}, str(dst / "voices" / f"{name}.safetensors"))
    names = sorted(p.stem for p in (dst / "voices").glob("*.safetensors"))
    config_file = dst / "config.json"
    if config_file.exists():
        config = json.loads(config_file.read_text(encoding="utf-8"))
        config["voices"] = names
        config_file.write_text(json.dumps(config, indent=1, ensure_ascii=False), encoding="utf-8")
    return names


def main(argv: list[str] | None = None) -> int:
    """Command line: add SRC's voices to the Kokoro folder DST."""
    p = argparse.ArgumentParser(prog="python -m worker.kinds.tts.voices", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("src", type=Path, help="kokoro-js tarball, voices folder or .npz")
    p.add_argument("dst", type=Path, help="Kokoro model folder (gets voices/NAME.safetensors)")
    a = p.parse_args(argv)
    try:
        names = write_voice_packs(read_voice_packs(a.src), a.dst)
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: cannot read voices from {a.src}: {exc}", file=sys.stderr)
        return 1
    print(f"{a.dst / 'voices'}: {len(names)} voices")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
