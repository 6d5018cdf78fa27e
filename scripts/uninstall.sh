#!/bin/sh
# Remove what scripts/install.sh installed: the venv, the unit, the sysusers.d file and the
# shared files. The config (/etc/joint-health-agent) and the history (/var/lib/joint-health-agent)
# stay, as does the user jha that owns that history; the script says how to remove them.
# Same variables as install.sh (DESTDIR, PREFIX, SYSCONFDIR, UNITDIR, SYSUSERSDIR).
set -eu

DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/opt/joint-health-agent}
SYSCONFDIR=${SYSCONFDIR:-/etc}
UNITDIR=${UNITDIR:-/etc/systemd/system}
SYSUSERSDIR=${SYSUSERSDIR:-/etc/sysusers.d}
D=$DESTDIR

say() { printf 'uninstall: %s\n' "$*"; }

case $PREFIX in /*) ;; *) echo "uninstall: PREFIX must be absolute" >&2; exit 1 ;; esac
if [ -z "$D" ] && [ "$(id -u)" -ne 0 ]; then
    echo "uninstall: needs root (or DESTDIR for a staged tree)" >&2
    exit 1
fi

if [ -z "$D" ] && [ -d /run/systemd/system ]; then
    # Only when systemd runs this machine; stopping a unit that is not loaded is fine.
    systemctl disable --now joint-health-agent.service 2>/dev/null || true
    systemctl disable --now jha-fleet.service 2>/dev/null || true
fi
rm -f "$D$UNITDIR/joint-health-agent.service"
rm -rf "$D$UNITDIR/joint-health-agent.service.d"
# The fleet's unit goes with the program; its settings and token in /etc/jha-fleet stay.
rm -f "$D$UNITDIR/jha-fleet.service"
rm -f "$D$UNITDIR/jha-stream@.service"
rm -f "$D$SYSUSERSDIR/joint-health-agent.conf"
rm -rf "$D$PREFIX/venv" "$D$PREFIX/share"
rmdir "$D$PREFIX" 2>/dev/null || true
if [ -z "$D" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
fi
say "removed the venv and the unit; kept $SYSCONFDIR/joint-health-agent (config) and" \
    "/var/lib/joint-health-agent (history). Remove them and the user jha by hand if wanted."
