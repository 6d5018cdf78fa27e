#!/bin/sh
# Install the joint-health agent as a systemd service (docs/service.md).
#
#   sudo make install                      # or: sudo scripts/install.sh
#   make install DESTDIR=/tmp/stage        # staged tree, no root side effects
#
# Variables (environment or make command line):
#   DESTDIR        staging root; empty = this machine (then root is needed and the user is made)
#   PREFIX         where the venv and shared files go         (/opt/joint-health-agent)
#   SYSCONFDIR     parent of the config directory             (/etc)
#   UNITDIR        where the unit goes                        (/etc/systemd/system)
#   SYSUSERSDIR    where the sysusers.d file goes             (/etc/sysusers.d)
#   PYTHON         interpreter of the venv; must be outside /home and /root, which the unit
#                  hides (ProtectHome=yes)                    (/usr/bin/python3)
#   EXTRAS         the drivers' dependencies to install: comma-separated extras of the package
#                  (ur, can; all = both)                                            (all)
#   JHA_DEPS_SITE  test mode: a site-packages directory that already holds the dependencies
#                  (e.g. the checkout's .venv); the package is installed with --no-deps and
#                  the venv reads the dependencies from there through a .pth file. Without it
#                  pip installs them from the package registries (~75 s, ~380 MB).
#
# Re-running upgrades the venv and the unit, and never touches an existing config.yaml.
set -eu
# User jha reads the venv and the shared files: the installing shell's umask (077 on a hardened
# host) must not leave them to root alone. The config's modes are set explicitly below.
umask 022

DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/opt/joint-health-agent}
SYSCONFDIR=${SYSCONFDIR:-/etc}
UNITDIR=${UNITDIR:-/etc/systemd/system}
SYSUSERSDIR=${SYSUSERSDIR:-/etc/sysusers.d}
PYTHON=${PYTHON:-/usr/bin/python3}
JHA_DEPS_SITE=${JHA_DEPS_SITE:-}

SERVICE_USER=jha
SRC=$(cd "$(dirname "$0")/.." && pwd)
VENV=$PREFIX/venv
CONFDIR=$SYSCONFDIR/joint-health-agent
D=$DESTDIR

say() { printf 'install: %s\n' "$*"; }
die() { printf 'install: error: %s\n' "$*" >&2; exit 1; }

case $PREFIX in /*) ;; *) die "PREFIX must be an absolute path, not '$PREFIX'" ;; esac
case $DESTDIR in ''|/*) ;; *) die "DESTDIR must be an absolute path, not '$DESTDIR'" ;; esac
command -v "$PYTHON" >/dev/null 2>&1 || die "PYTHON=$PYTHON not found (python3 >= 3.11 needed)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$PYTHON is older than 3.11"
PYTHON_REAL=$("$PYTHON" -c 'import os, sys; print(os.path.realpath(sys.executable))')
case $PYTHON_REAL in
    /home/*|/root/*) die "$PYTHON_REAL is under /home or /root, which the service cannot see" \
        "(ProtectHome=yes); use a system interpreter, e.g. PYTHON=/usr/bin/python3" ;;
esac
if [ -n "$JHA_DEPS_SITE" ]; then
    [ -d "$JHA_DEPS_SITE" ] || die "JHA_DEPS_SITE=$JHA_DEPS_SITE is not a directory"
    case $JHA_DEPS_SITE in /*) ;; *) die "JHA_DEPS_SITE must be an absolute path" ;; esac
fi
if [ -z "$D" ] && [ "$(id -u)" -ne 0 ]; then
    die "installing on this machine needs root (or set DESTDIR for a staged tree)"
fi

# --- the service user ---------------------------------------------------------------------
install -D -m 0644 "$SRC/systemd/joint-health-agent.sysusers.conf" \
    "$D$SYSUSERSDIR/joint-health-agent.conf"
if [ -z "$D" ]; then
    if getent passwd "$SERVICE_USER" >/dev/null; then
        say "user $SERVICE_USER exists"
    elif command -v systemd-sysusers >/dev/null 2>&1; then
        systemd-sysusers "$SYSUSERSDIR/joint-health-agent.conf"
    else
        # Same user as the sysusers.d file describes, for systems without systemd-sysusers.
        useradd --system --user-group --no-create-home --home-dir /var/lib/joint-health-agent \
            --shell /usr/sbin/nologin --comment "Joint-health agent" "$SERVICE_USER"
    fi
fi

# --- the package, in its own venv ----------------------------------------------------------
say "venv $D$VENV (python $PYTHON_REAL)"
if [ -n "$JHA_DEPS_SITE" ]; then
    # pip comes with the dependencies (below), which saves ensurepip's few seconds per test.
    "$PYTHON" -m venv --without-pip "$D$VENV"
else
    "$PYTHON" -m venv "$D$VENV"
fi
SITE=$("$D$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
BUILD=$(mktemp -d)
trap 'rm -rf "$BUILD"' EXIT
# Build from a copy: an in-tree build would leave build/ and egg-info in the checkout.
(cd "$SRC" && tar -cf - --exclude=__pycache__ pyproject.toml README.md agent drivers) \
    | (cd "$BUILD" && tar -xf -)
PIP="$D$VENV/bin/python -m pip --disable-pip-version-check --quiet"
if [ -n "$JHA_DEPS_SITE" ]; then
    # A plain path line: the directory joins sys.path after the venv's own site-packages, so
    # the installed agent wins over any editable checkout in there (its .pth is not run).
    echo "$JHA_DEPS_SITE" > "$SITE/jha-deps.pth"
    # Only the build backend (setuptools) comes from the package registries.
    $PIP install --no-deps "$BUILD"
    say "dependencies from $JHA_DEPS_SITE (test mode)"
else
    $PIP install "$BUILD[${EXTRAS:-all}]"
fi

if [ -n "$D" ]; then
    # A venv is not relocatable: scripts and activate files name the path they were made at.
    # Point them at the final path, so the staged tree is what the machine will have.
    grep -rlI -F "$D$VENV" "$D$VENV/bin" "$D$VENV/pyvenv.cfg" 2>/dev/null | while read -r f; do
        sed -i "s|$D$VENV|$VENV|g" "$f"
    done
    # Byte code records its source path for tracebacks; strip the staging root from the
    # agent's own (pip's and setuptools' tracebacks may keep it).
    for pkg in agent drivers; do
        "$D$VENV/bin/python" -m compileall -q -f -s "$D" -p / "$SITE/$pkg" >/dev/null
    done
fi

# --- unit, drop-in example, documentation ---------------------------------------------------
install -D -m 0644 "$SRC/systemd/joint-health-agent.service" \
    "$D$UNITDIR/joint-health-agent.service"
install -D -m 0644 "$SRC/systemd/ur-realtime.conf" "$D$PREFIX/share/systemd/ur-realtime.conf"
install -D -m 0644 "$SRC/docs/service.md" "$D$PREFIX/share/doc/service.md"
# The plant-wide service (README, "Fleet"): installed, never enabled here; it runs on the one
# host that holds PostgreSQL, with its own settings in $SYSCONFDIR/jha-fleet.
install -D -m 0644 "$SRC/systemd/jha-fleet.service" "$D$UNITDIR/jha-fleet.service"
# A template for G-code streams to GRBL controllers (docs/feedrate.md); started per job.
install -D -m 0644 "$SRC/systemd/jha-stream@.service" "$D$UNITDIR/jha-stream@.service"
install -D -m 0644 "$SRC/config/fleet-example.yaml" "$D$SYSCONFDIR/jha-fleet/fleet.example.yaml"

# --- configuration: root:jha, the service reads it and cannot change it ---------------------
install -d -m 0750 "$D$CONFDIR"
# The example is refreshed on every install so a plant can diff its config against it.
install -m 0640 "$SRC/config/example.yaml" "$D$CONFDIR/config.example.yaml"
if [ -e "$D$CONFDIR/config.yaml" ]; then
    say "kept the existing $D$CONFDIR/config.yaml"
else
    install -m 0640 "$SRC/config/example.yaml" "$D$CONFDIR/config.yaml"
    say "installed the example config as $D$CONFDIR/config.yaml (edit it)"
fi
if [ "$(id -u)" -eq 0 ] && getent group "$SERVICE_USER" >/dev/null; then
    chown root:"$SERVICE_USER" "$D$CONFDIR" "$D$CONFDIR/config.yaml" \
        "$D$CONFDIR/config.example.yaml"
else
    say "group $SERVICE_USER unknown here: set root:$SERVICE_USER on $CONFDIR when deploying"
fi

# --- check what was installed with what was installed ----------------------------------------
# The venv's python finds its venv from its own location, so this works in a staged tree too;
# -I keeps a checkout in the current directory from being imported instead.
"$D$VENV/bin/python" -I -m agent.cli config check "$D$CONFDIR/config.yaml"

if [ -z "$D" ]; then
    say "next: systemctl daemon-reload && systemctl enable --now joint-health-agent"
    say "(an upgrade of a running agent: systemctl daemon-reload && systemctl restart" \
        "joint-health-agent)"
else
    say "staged in $D; on the target: systemd-sysusers, then" \
        "systemctl daemon-reload && systemctl enable --now joint-health-agent"
fi
