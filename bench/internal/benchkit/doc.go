// Package benchkit holds what the benchmark drivers under bench/ share:
// the flags every driver has and its run's set-up (Flags, Scratch); a
// Meteor cluster of `meteor server` processes (StartMeteor, MeteorCluster)
// and its PKI from the meteor CLI (InitMeteorCA); child processes run in
// their own process groups and stopped with SIGTERM then SIGKILL; CPU time
// read from /proc; the facts about the machine a run reports; percentiles;
// the results files; building the meteor binary; free loopback ports; the
// leader elections of a Meteor cluster (from its highest Raft term); and
// the driver's main and scratch directory. It starts no peer system (etcd,
// Mosquitto): their drivers do.
package benchkit
