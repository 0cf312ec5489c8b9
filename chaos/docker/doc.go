// Package docker holds Meteor's multi-host chaos suite, the first user of
// `meteor chaos attack`'s machinery (chaos/hosts and
// scenario.RunDeployment): five real meteor server processes, each in its
// own Docker container (an image built FROM scratch around the static
// binary and a CA made for the run, since no image can be pulled) on a
// private network the suite creates, and a sixth container running the
// fleet simulator (`meteor sim`) with a few hundred agents. A seeded plan
// of faults goes through the Docker driver: docker network disconnect,
// docker kill and start, docker pause, and nftables cuts inside the
// containers' network namespaces. The checks are those of `meteor chaos
// attack`. It runs from make chaos; go test skips it unless -chaos.docker
// is given, and skips with a message where Docker is not available.
package docker
