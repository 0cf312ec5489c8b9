#!/usr/bin/env bash
# cluster.sh: the secure three-region Meteor cluster of deploy/compose.yaml
# on this Docker host (docs/deploy.md). make cluster-up and make
# cluster-down run it; so does the compose test (make test-docker).
#
#   cluster.sh up      build the image, create the PKI if the state dir has
#                      none, bring up the three servers, wait until they
#                      are healthy, enroll a simulated fleet per region,
#                      print how to reach the cluster
#   cluster.sh down    remove the containers and networks; the state dir
#                      (PKI, data, tokens) is kept for the next up
#   cluster.sh purge   down, then remove the state dir too
#   cluster.sh env     print the export line and the console's address again
#   cluster.sh compose ARGS...
#                      run docker-compose on the cluster, e.g. `compose ps`,
#                      `compose logs eu-1`, `compose stop eu-1 sim-eu-west`
#
# Environment (all optional):
#   METEOR_STATE        state dir (default deploy/state, gitignored)
#   METEOR_PROJECT      Compose project name (default meteor)
#   METEOR_NET          first three octets of the four /24 subnets: wan, then
#                       eu-west, us-east, ap-south (default 172.30.0: 172.30.0-3.0/24)
#   METEOR_IMAGE        image tag (default meteor:dev)
#   METEOR_SIM_DEVICES  simulated devices per region (default 30)
#   METEOR_BUILD_DIR    where the static binary is built (default bin/image);
#                       cluster.sh runs it too, as the CLI
#   METEOR_BUILD=0      use the image and the binary as they are
#   METEOR_UP_TIMEOUT   seconds to wait for the servers (default 180)
#   GO                  the go command (default go)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
compose_file=$root/deploy/compose.yaml
state=${METEOR_STATE:-$root/deploy/state}
mkdir -p "$state"
state=$(cd "$state" && pwd)
project=${METEOR_PROJECT:-meteor}
net=${METEOR_NET:-172.30.0}
image=${METEOR_IMAGE:-meteor:dev}
devices=${METEOR_SIM_DEVICES:-30}
build_dir=${METEOR_BUILD_DIR:-$root/bin/image}
meteor=$build_dir/meteor

servers=(eu-1 us-1 ap-1)
regions=(eu-west us-east ap-south)

die() { echo "cluster.sh: $*" >&2; exit 1; }

IFS=. read -r o1 o2 o3 <<<"$net"
[[ $o1 =~ ^[0-9]+$ && $o2 =~ ^[0-9]+$ && $o3 =~ ^[0-9]+$ && $o3 -le 252 ]] ||
	die "METEOR_NET=$net: want three octets such as 172.30.0, the third at most 252"
wan=$o1.$o2.$o3
region_net=("$o1.$o2.$((o3 + 1))" "$o1.$o2.$((o3 + 2))" "$o1.$o2.$((o3 + 3))")
# Server i: .1i on the wan, .11 on its region's network.
wan_ip() { echo "$wan.$((11 + $1))"; }

export METEOR_STATE=$state METEOR_IMAGE=$image METEOR_SIM_DEVICES=$devices
export METEOR_NET_WAN=$wan METEOR_NET_EU=${region_net[0]} METEOR_NET_US=${region_net[1]} METEOR_NET_AP=${region_net[2]}
export METEOR_UID=${METEOR_UID:-$(id -u)} METEOR_GID=${METEOR_GID:-$(id -g)}

# compose runs docker-compose (1.x), or the compose plugin where only it
# is installed.
compose() {
	if command -v docker-compose >/dev/null; then
		docker-compose -p "$project" -f "$compose_file" "$@"
	else
		docker compose -p "$project" -f "$compose_file" "$@"
	fi
}

# cli runs the CLI against server i (default 0) with the admin token.
cli() {
	local i=0
	if [[ ${1:-} =~ ^[0-9]$ ]]; then i=$1; shift; fi
	"$meteor" --addr "https://$(wan_ip "$i"):8470" --ca-cert "$state/pki/ca.pem" --token-file "$state/pki/admin.token" "$@"
}

check_tools() {
	command -v docker >/dev/null || die "docker is not installed"
	docker info >/dev/null 2>&1 || die "the Docker daemon is not reachable (docker info fails)"
	command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 ||
		die "neither docker-compose nor the docker compose plugin is installed"
}

# pki creates the material of `meteor tls init` once, then gives each
# container its own: a server its certificate and key and the shared
# files (never another server's key), a fleet the CA certificate and its
# region's enrollment token (made later, once the servers are up).
pki() {
	if [[ ! -f $state/pki/ca.pem ]]; then
		local hosts
		hosts=$(wan_ip 0),$(wan_ip 1),$(wan_ip 2),${region_net[0]}.11,${region_net[1]}.11,${region_net[2]}.11
		"$meteor" tls init --dir "$state/pki" --ids "$(IFS=,; echo "${servers[*]}")" --hosts "$hosts"
	fi
	local i id dir
	for i in 0 1 2; do
		id=${servers[$i]}
		dir=$state/servers/$id
		mkdir -p "$dir/tls" "$dir/data" "$state/sims/${regions[$i]}/tls" "$state/sims/${regions[$i]}/data"
		chmod 700 "$dir" "$dir/tls" "$dir/data" "$state/sims/${regions[$i]}"
		# ca-key.pem signs the enrollments of devices; every server has it
		# here, so that a fleet enrolls whichever region is down.
		for f in ca.pem ca-key.pem "server-$id.pem" "server-$id-key.pem" cluster.secret gossip.key admin-token.sha256; do
			install -m 0600 "$state/pki/$f" "$dir/tls/$f"
		done
		install -m 0600 "$state/pki/ca.pem" "$state/sims/${regions[$i]}/tls/ca.pem"
	done
}

# wait_healthy waits until every server answers its liveness probe (no
# token: a member that knows a leader), then until the members list shows
# three voters, asked with the admin token the leader creates once elected.
wait_healthy() {
	local limit=${METEOR_UP_TIMEOUT:-180} start=$SECONDS live i stopped
	while :; do
		live=0
		for i in 0 1 2; do
			if "$meteor" --addr "https://$(wan_ip "$i"):8470" --ca-cert "$state/pki/ca.pem" health --live >/dev/null 2>&1; then
				live=$((live + 1))
			fi
		done
		if ((live == 3)) && [[ $(cli members -o json 2>/dev/null | grep -c '"suffrage": *"voter"') == 3 ]]; then
			return 0
		fi
		stopped=$(compose ps --services --filter status=stopped 2>/dev/null | grep -E '^(eu|us|ap)-1$' || true)
		if [[ -n $stopped ]]; then
			compose logs --tail 30 $stopped >&2 || true
			die "server container(s) stopped: $stopped (logs above)"
		fi
		if ((SECONDS - start > limit)); then
			compose ps >&2 || true
			compose logs --tail 30 eu-1 us-1 ap-1 >&2 || true
			die "$live of 3 servers live after ${limit}s (logs above)"
		fi
		sleep 1
	done
}

# tokens creates each region's enrollment token once: the fleet's devices
# enroll with it and get its labels (region=<region>, fleet=sim).
tokens() {
	local i region file secret
	for i in 0 1 2; do
		region=${regions[$i]}
		file=$state/sims/$region/tls/enroll.token
		[[ -s $file ]] && continue
		secret=$(cli token create --enroll --name "sim-$region" --labels "region=$region,fleet=sim" --uses "$devices" --ttl 24h |
			awk '$1 == "secret" { print $2 }')
		[[ -n $secret ]] || die "no enrollment token for $region"
		(umask 077 && echo "$secret" >"$file")
	done
}

print_env() {
	[[ -f $state/pki/admin.token ]] || die "no cluster in $state (run cluster.sh up)"
	local token
	token=$(cat "$state/pki/admin.token")
	echo "export METEOR_ADDR=https://$(wan_ip 0):8470 METEOR_CACERT=$state/pki/ca.pem METEOR_TOKEN=$token"
	echo "console: https://$(wan_ip 0):8470/ui/#token=$token"
}

up() {
	check_tools
	if [[ ${METEOR_BUILD:-1} != 0 ]]; then
		"$root/deploy/build-image.sh" "$image" "$build_dir"
	fi
	[[ -x $meteor ]] || die "$meteor is missing (run without METEOR_BUILD=0)"
	pki
	compose up -d eu-1 us-1 ap-1
	echo "waiting for the three servers to be healthy ..."
	wait_healthy
	tokens
	compose up -d sim-eu-west sim-us-east sim-ap-south
	echo
	cli members
	echo
	echo "Three regions (eu-west, us-east, ap-south), a server and $devices simulated devices each; state in $state."
	echo "Point the CLI at it ($meteor is a static meteor):"
	print_env
	echo "The servers' certificates come from the cluster CA above: import it into the browser as an authority to open the console without a warning."
}

down() {
	check_tools
	compose down --remove-orphans
}

case ${1:-} in
up) up ;;
down) down ;;
purge)
	down
	rm -rf "$state"
	echo "removed $state"
	;;
env) print_env ;;
compose)
	shift
	compose "$@"
	;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
	;;
esac
