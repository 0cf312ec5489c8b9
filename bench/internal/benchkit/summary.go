package benchkit

// Row is one line of the benchmark summary table that `make bench` writes
// to bench/results/README.md. Every driver puts its rows in its results
// JSON under the key "summary"; cmd bench/report gathers them.
type Row struct {
	// Bench is the row number (1 intent writes, 2 fan-out, 3
	// reconnect storm, 4 scale, 5 seed scenario, 6 edge footprint), which
	// orders the table.
	Bench int `json:"bench"`
	// Name is the benchmark's short name ("intents", "fanout", ...), and
	// the stem of its results files.
	Name string `json:"name"`
	// Key names the goal of the table this row answers (one of
	// GoalKeys), "" for a row without one; bench/report shows a goal no
	// results file answers as not run.
	Key string `json:"key,omitempty"`
	// Figure says what was measured, with its unit and conditions
	// ("writes/s at 64 clients", "time to 99% applied, 5% loss").
	Figure string `json:"figure"`
	// Meteor is Meteor's figure, Peer the figure it is compared with
	// (etcd, Mosquitto, full handshakes...), PeerName what Peer is.
	Meteor   string `json:"meteor"`
	Peer     string `json:"peer,omitempty"`
	PeerName string `json:"peer_name,omitempty"`
	// Ratio is Meteor over Peer, or whichever way round the Goal reads.
	Ratio string `json:"ratio,omitempty"`
	// Goal is the goal for this figure, if it sets one; Met says
	// whether this run met it (nil where there is no goal).
	Goal string `json:"goal,omitempty"`
	Met  *bool  `json:"met,omitempty"`
	// Elections is the number of Raft leader elections Meteor's cluster
	// held while Meteor's figure was measured (RaftTerm, Elections);
	// PeerElections the same for the peer, where it elects leaders too.
	// Nil where not recorded.
	Elections     *int `json:"leader_elections,omitempty"`
	PeerElections *int `json:"peer_leader_elections,omitempty"`
	// Note is what limits the figure, or why a part was skipped.
	Note string `json:"note,omitempty"`
}

// MetGoal returns a pointer to v, for Row.Met.
func MetGoal(v bool) *bool { return &v }

// The goals of the table, by Key, in the table's order, with the
// target that measures each.
var GoalKeys = []Goal{
	{"intents-writes", "intent writes/s at 64 clients, 3 servers", ">= 1.2x etcd, p99 <= etcd's", "make bench-intents"},
	{"intents-cpu", "server CPU per write", "<= etcd's", "make bench-intents"},
	{"fanout-applied", "10,000 devices, 99 % applied", "<= 1.0x Mosquitto with TLS and persistence", "make bench-fanout"},
	{"fanout-durable", "10,000 devices, 99 % reported and durable", "<= 2.0x Mosquitto's 99 % reported", "make bench-fanout"},
	{"fleet-converge", "largest fleet converging on one change", "100,000 devices <= 60 s after the change", "make bench-fleet"},
	{"fleet-connect", "connect 100,000 devices", "<= 120 s", "make bench-fleet"},
	{"sessions-memory", "server memory per idle session", "<= 64 KiB", "make bench-sessions"},
	{"elections", "leader elections during any benchmark", "0", "make bench-report"},
}

// Goal is one goal of the table.
type Goal struct {
	Key, Row, Goal, Target string
}
