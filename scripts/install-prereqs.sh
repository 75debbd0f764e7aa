#!/usr/bin/env bash
# Checks the machine-level prerequisites of the local environment; as root on Debian it
# installs what is missing from Debian's packages, elsewhere it says what to install.
set -euo pipefail

missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || [ -n "${ARES_DEV_PG_BINDIR:-}" ] \
  || missing+=(postgresql-15)
command -v runuser >/dev/null 2>&1 || missing+=(util-linux)
# kcat: the audit of a log dumped by standard Kafka tooling (docs/clients.md).
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
# Headless Chromium for the dashboard's browser tests (tests/browser): Playwright for Python
# drives Debian's own build (/usr/bin/chromium); no browser is ever downloaded by Playwright.
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing from Debian packages: ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "missing prerequisites: ${missing[*]}" >&2
  echo "install them (Debian: sudo apt-get install ${missing[*]}) and run again" >&2
  exit 1
fi
