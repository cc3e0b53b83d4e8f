#!/bin/sh
# Get Debian's espeak-ng: the audio tests speak known sentences into WAV files with it and
# transcribe them back (tests/audio/). Installs it with apt-get when missing and we are root (or
# have password-less sudo); otherwise those tests skip and say why. Never fails the setup.
[ "$(uname -s)" = "Linux" ] || exit 0
command -v espeak-ng >/dev/null 2>&1 && exit 0
if command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO=none; fi
  if [ "$SUDO" != none ]; then
    echo "Installing espeak-ng for the speech tests..."
    ($SUDO apt-get install -y -q --no-install-recommends espeak-ng >/dev/null 2>&1 || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q --no-install-recommends espeak-ng >/dev/null 2>&1; }) \
      && command -v espeak-ng >/dev/null 2>&1 && { echo "espeak-ng installed."; exit 0; }
  fi
fi
echo "NOTE: no espeak-ng; the speech-to-text tests will be skipped."
echo "      Install it to run them: sudo apt-get install espeak-ng (Debian/Ubuntu)"
exit 0
