// Package version holds Meteor's release version, the one constant the
// server (cluster.Version) and both binaries, meteor and meteor-agent,
// share. It imports nothing, so the agent binary can name its version
// without linking the server.
package version

// Version is Meteor's release version.
const Version = "0.1.0"
