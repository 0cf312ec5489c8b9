# The Meteor image: the static meteor binary and nothing else, FROM scratch
# (no base image is pulled). Build it with `make image`, which runs
# deploy/build-image.sh: the binary is built on the host with the local Go
# toolchain (CGO_ENABLED=0) into the build context, here bin/image:
#
#   bin/image/meteor   the static binary
#   bin/image/data/    an empty directory, the data dir's mount point
#
# It runs as user 65532 (no account, no shell, no home). The data dir
# /var/lib/meteor belongs to that user, so a named volume mounted there
# is writable; a directory of the host mounted there must be writable by
# the user the container runs as (docker run --user, or user: in
# deploy/compose.yaml). TLS material is mounted, never built in.
FROM scratch
ARG VERSION=dev
LABEL org.opencontainers.image.title="meteor" \
      org.opencontainers.image.description="Meteor: a control plane for fleets of edge devices (server, agent, simulator and operator CLI in one static binary)" \
      org.opencontainers.image.version="${VERSION}"
COPY meteor /meteor
COPY --chown=65532:65532 data /var/lib/meteor
USER 65532:65532
ENTRYPOINT ["/meteor"]
CMD ["--help"]
