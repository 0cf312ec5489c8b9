#!/bin/sh
# install-mosquitto.sh installs Debian's mosquitto package (which provides
# /usr/sbin/mosquitto) when it is missing. It needs root; without root it
# prints what to run and exits 2, so the caller can skip the Mosquitto
# comparison.
set -eu

if command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "mosquitto is not installed and this is not root: run 'sudo apt-get install -y mosquitto' to compare against Mosquitto" >&2
	exit 2
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends mosquitto
# The package may start its own broker on port 1883; the benchmark runs its
# own broker on other ports, so leave a packaged one alone but say so.
if pgrep -x mosquitto >/dev/null 2>&1; then
	echo "note: a system mosquitto service is running; the benchmark does not use it" >&2
fi
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ]
