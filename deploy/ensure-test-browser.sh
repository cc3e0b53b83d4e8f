#!/bin/sh
# Get Debian's Chromium for the headless-browser test of /docs (tests/e2e/test_docs_browser.py):
# Playwright drives /usr/bin/chromium, so no browser is downloaded. Installs it with apt-get when
# it is missing and we are root (or have password-less sudo); otherwise the test skips. Never
# fails the setup.
[ "$(uname -s)" = "Linux" ] || exit 0
[ -x /usr/bin/chromium ] && { echo "Chromium: /usr/bin/chromium"; exit 0; }
if command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else SUDO=none; fi
  if [ "$SUDO" != none ]; then
    echo "Installing chromium for the /docs browser test..."
    ($SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || { $SUDO apt-get update -q >/dev/null 2>&1 && $SUDO apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; }) \
      && [ -x /usr/bin/chromium ] && { echo "Chromium installed."; exit 0; }
  fi
fi
echo "NOTE: no /usr/bin/chromium; the /docs browser test will be skipped."
echo "      Install it to run it: sudo apt-get install chromium (Debian/Ubuntu)"
exit 0
