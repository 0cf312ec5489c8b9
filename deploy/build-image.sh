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
docker build -q --build-arg VERSION="$version" -t "$tag" -f "$root/Dockerfile" "$dir" >/dev/null
echo "built image $tag ($(du -k "$dir/meteor" | cut -f1) KB binary $dir/meteor, static)"
