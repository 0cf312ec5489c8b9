#!/bin/sh
# install-etcd.sh installs Debian's etcd-server package (which provides
# /usr/bin/etcd) when it is missing. It needs root; without root it prints
# what to run and exits 2, so the caller can skip the etcd comparison.
set -eu

if command -v etcd >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "etcd is not installed and this is not root: run 'sudo apt-get install -y etcd-server' to compare against etcd" >&2
	exit 2
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends etcd-server
# The package may start its own etcd service; the benchmark runs its own
# cluster on other ports, so leave a packaged one alone but say so.
if pgrep -x etcd >/dev/null 2>&1; then
	echo "note: a system etcd service is running; the benchmark does not use it" >&2
fi
command -v etcd >/dev/null 2>&1
