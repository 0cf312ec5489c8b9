// Package benchkit holds what the benchmark drivers under bench/ share:
// child processes run in their own process groups and stopped with SIGTERM
// then SIGKILL, CPU time read from /proc, the facts about the machine a
// run reports, percentiles, the results files, building the meteor
// binary, free loopback ports, the leader elections of a Meteor cluster
// (from its highest Raft term), and the driver's main and scratch
// directory.
package benchkit
