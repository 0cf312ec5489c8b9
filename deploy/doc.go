// Package deploy holds no code: it is what it takes to run Meteor beyond a
// development machine, and the tests that keep it working (docs/deploy.md):
//
//   - build-image.sh builds the static binary with the local Go toolchain
//     and the image FROM scratch around it (the repository's Dockerfile);
//     make image, make cluster-up and the Docker tests all use it;
//   - systemd/ has the units of meteor server and the agent, with their
//     hardening, example config files and the sysusers file;
//     systemd_test.go verifies them with systemd-analyze where it exists;
//   - compose.yaml and cluster.sh run a secure three-region cluster on
//     Docker (make cluster-up, make cluster-down); compose_test.go (make
//     test-docker) takes it through a region's loss and a rolling
//     restart of every server.
//
// Tests import what they need; nothing imports this package.
package deploy
