// Command intents benchmarks replicated intent writes: it starts a
// three-server Meteor cluster and a three-member etcd cluster on loopback,
// drives both with the same closed-loop HTTP/1.1 + JSON write load at
// several concurrency levels, and reports throughput, latency and errors
// side by side.
//
// At each level the systems take turns: -rounds measured windows each
// (3 by default), Meteor then etcd, then etcd then Meteor, and so on, so
// a change in the shared machine's speed hits both alike; a level's row
// pools its system's windows as one long window, and the ratios list each
// round's too.
//
// Both systems are driven the same way: one keep-alive http.Client, each
// simulated client sending one write at a time and spreading its requests
// round-robin over all three servers. Meteor receives
// PUT /v1/intents/{name} with an intent document; etcd receives
// POST /v3/kv/put through its gRPC-JSON gateway with the same document
// bytes as the value. Both keep fsync on (Meteor's raft-boltdb always
// syncs; etcd runs with its defaults, never --unsafe-no-fsync).
//
// It owns every process it starts: servers run in their own process
// groups, die with the driver (Pdeathsig), and are stopped, then killed,
// on every exit path including Ctrl-C. Data and logs live in one temporary
// directory, removed after a successful run unless -keep is given.
//
// Results go to stdout, bench/results/intents.json and
// bench/results/intents.md; the JSON's summary rows are the writes/s at
// 64 clients (goal: 1.2 times etcd's with a p99 no higher than etcd's)
// and the server CPU per write (goal: no more than etcd's), each with the
// leader elections of its window, and the JSON records the Meteor
// cluster's elections over its whole life. Nothing here is imported by the rest of the
// module; it depends only on fsm/intent (to check its document is valid)
// and cluster/api (for the health type).
//
// Run it from the module root:
//
//	go run ./bench/intents
//
// Flags change the levels (-clients 1,16,64), the windows (-duration,
// -warmup, -rounds), the key space and document size (-keys, -doc-size), and the
// binaries (-meteor-bin, -etcd-bin; by default ./cmd/meteor is built into
// the temporary dir, and etcd is taken from PATH or installed with
// bench/install-etcd.sh when running as root). For diagnosis, -leader-only
// sends every write to the leader (no forwarding), -perf-leader samples
// each leader with Linux perf during the first round of the highest level, and -cpuprofile
// profiles the driver itself.
package main
