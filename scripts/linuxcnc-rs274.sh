#!/usr/bin/env bash
# LinuxCNC's standalone G-code interpreter `rs274`, the independent oracle of the G-code tests
# (tests/peers/linuxcnc_rs274.py), from Debian's own package, unpacked into var/linuxcnc.
#
# Unpacked, not installed: `apt-get install linuxcnc-uspace` pulls in 362 packages (Qt, GDAL,
# ffmpeg, GStreamer, ...) for its GUIs, minutes of a test run's 15; rs274 itself needs only the
# package's own libraries and libboost-python (checked with ldd when this script was written).
set -euo pipefail
ROOT=${1:-var/linuxcnc}
PACKAGES=(linuxcnc-uspace libboost-python1.74.0)
if [ -x "$ROOT/usr/bin/rs274" ] && [ -d "$ROOT/usr/share/linuxcnc/ncfiles" ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "linuxcnc-rs274: no apt-get to download ${PACKAGES[*]}" >&2
  exit 1
fi
mkdir -p "$ROOT/debs"
cd "$ROOT/debs"
# apt-get download needs the package lists; a fresh machine may not have them yet.
if ! apt-get download "${PACKAGES[@]}" >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  apt-get download "${PACKAGES[@]}" >/dev/null
fi
for deb in ./*.deb; do
  dpkg-deb -x "$deb" ..
done
echo "linuxcnc-rs274: unpacked $(ls ./*.deb | tr '\n' ' ')into $ROOT"
