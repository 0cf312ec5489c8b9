// Package pki is the cluster's certificate authority: it creates and loads
// the CA, issues server and device certificates, and reads and writes
// certificates and keys in PEM. The next security work (server-to-server
// and operator certificates) belongs here too.
//
// What pki owns: generating keys, choosing subjects, SANs, key usages and
// validity, and the PEM encoding of what it issues. It is used by whoever
// issues certificates (meteor ca, meteor dev, the simulator, the chaos
// harness, tests) and by whoever loads them from files.
//
// What pki must not touch: the format of an identity in a certificate
// (the meteor://device/<id> and meteor://server/<id> URI SANs, the cluster
// server name) is the protocol's and defined once in package wire
// (wire.DeviceURI, wire.ServerURI, wire.ClusterServerName); pki uses it and
// wire verifies it (wire.DeviceIDFromCert, wire.ServerTLSConfig). pki
// imports wire and the standard library only, never package cluster, which
// imports pki.
package pki
