#!/usr/bin/env bash
# Installs the headless browser the dashboard's tests drive (Debian's
# Chromium, through the OS package manager) when it is missing. A machine
# that has it installs nothing.
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
	exit 0
fi
sudo=""
if [[ "$(id -u)" != 0 ]]; then
	command -v sudo >/dev/null 2>&1 || { echo "browser: chromium is missing; install it as root: apt-get install -y chromium" >&2; exit 1; }
	sudo="sudo"
fi
command -v apt-get >/dev/null 2>&1 || { echo "browser: chromium is missing and this is no Debian-like system; install Chromium so that 'chromium' is on PATH" >&2; exit 1; }
echo "browser: installing Debian's chromium (about a minute)"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null 2>&1 || { echo "browser: apt-get installed no 'chromium' command" >&2; exit 1; }
