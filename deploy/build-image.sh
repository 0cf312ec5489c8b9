#!/bin/sh
# build-image.sh [TAG [DIR]]: build the static meteor binary with the local
# Go toolchain (CGO_ENABLED=0, for the host's architecture) into DIR
# (default bin/image) and the image TAG (default meteor:dev) FROM scratch
# around it, from the Dockerfile at the repository's root. The one way the
# image is built: make image, make cluster-up, the Docker chaos suite and
# the compose test all run it. GO names the go command (default go).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
tag=${1:-meteor:dev}
dir=${2:-$root/bin/image}
go=${GO:-go}
command -v "$go" >/dev/null || { echo "build-image.sh: no Go toolchain ($go) on PATH" >&2; exit 1; }
command -v docker >/dev/null || { echo "build-image.sh: docker is not installed" >&2; exit 1; }
mkdir -p "$dir/data"
version=$(cd "$root" && git describe --always --dirty 2>/dev/null || echo dev)
(cd "$root" && CGO_ENABLED=0 GOOS=linux "$go" build -trimpath -ldflags "-s -w" -o "$dir/meteor" ./cmd/meteor)
if command -v file >/dev/null && ! file "$dir/meteor" | grep -q 'statically linked'; then
	echo "build-image.sh: $dir/meteor is not statically linked: $(file "$dir/meteor")" >&2
	exit 1
fi
old=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
# Its output goes only with a failure: Docker's notice that the classic
# builder is deprecated is not this build's business.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! docker build -q --build-arg VERSION="$version" -t "$tag" -f "$root/Dockerfile" "$dir" >"$log" 2>&1; then
	cat "$log" >&2
	echo "build-image.sh: docker build failed" >&2
	exit 1
fi
# The image the tag named before, now untagged, goes (unless in use).
if [ -n "$old" ] && [ "$old" != "$(docker image inspect -f '{{.Id}}' "$tag")" ]; then
	docker rmi "$old" >/dev/null 2>&1 || true
fi
echo "built image $tag ($(du -k "$dir/meteor" | cut -f1) KB binary $dir/meteor, static)"
