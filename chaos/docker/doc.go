// Package docker holds Meteor's multi-host chaos suite: real meteor server
// processes, each in its own Docker container (an image built FROM scratch
// around the static binary, since no image can be pulled) on a private
// network the suite creates, cut off with docker network disconnect,
// crashed with docker kill, and frozen with docker pause. It runs from
// make chaos; go test skips it unless -chaos.docker is given, and skips
// with a message where Docker is not available.
package docker
