#!/usr/bin/env bash
# Install the Debian packages the tests' protocol peers need, only those missing.
# Each entry is "command-to-check:package".
set -euo pipefail
NEEDED=(
  "ip:iproute2"          # network namespaces for the CAN udp_multicast test
  "mosquitto:mosquitto"  # the MQTT broker the publishing tests start
  "mosquitto_sub:mosquitto-clients"  # the fleet benchmark's transport baseline (bench/)
  "chromium:chromium"    # headless screenshot test of the HTML report
  "systemd-analyze:systemd"  # verify and security-score the unit
  "faketime:faketime"    # libfaketime: the wall clock stepped under the daemon (tests/faults)
  "prometheus:prometheus"  # a real Prometheus scrapes the metrics endpoint (tests/publish)
  # node-opcua, the second OPC UA server peer (tests/peers/opcua_node), runs on Node.js;
  # make installs it from the npm registry (npm ci, package-lock.json).
  "node:nodejs"
  "npm:npm"
  # Throwaway clusters of the fleet tests (tests/peers/postgres.py). Debian keeps initdb in
  # /usr/lib/postgresql/<version>/bin, off PATH: checked there too (below).
  "initdb:postgresql"
)
missing=()
for entry in "${NEEDED[@]}"; do
  cmd=${entry%%:*}; pkg=${entry##*:}
  if [ "$cmd" = initdb ] && compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    continue
  fi
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: missing ${missing[*]} and no apt-get to install them" >&2
  exit 1
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "system-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
