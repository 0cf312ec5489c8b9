// Package acl is Meteor's access-control vocabulary: the policies a token
// carries, the actions an operator request performs, which policies allow
// which actions, how a label-selector scope narrows a token, and how token
// secrets are generated and hashed.
//
// acl is pure logic. It holds no state (tokens live in the replicated state,
// package fsm), reads no clock and does no I/O beyond the random source a
// caller hands to Generate. The HTTP API authenticates a request by hashing
// its bearer secret (HashSecret), looking the hash up in the state, and
// asking the token's Grant whether the request's action is allowed.
package acl
