// Package hosts injects faults into a real Meteor deployment: servers
// running as processes on hosts or in containers, which chaos cannot wrap.
//
// It owns:
//
//   - [Driver]: the actions a deployment supports on one server (kill and
//     start again, pause and unpause, isolate and heal, cut and mend the
//     link between two servers), with two implementations: [Docker]
//     (docker kill/start/pause/unpause/network disconnect/connect, and
//     nftables rules inside a container's network namespace, entered from
//     the host with nsenter, for cuts between two servers) and [Commands]
//     (shell command templates given by the operator, for deployments that
//     are not Docker).
//   - [Plan]: a fault schedule drawn from a seed: which fault, when, for
//     how long, and which followers it picks. The same seed gives the same
//     plan; which server leads is only known when the fault starts.
//   - [Runner]: carries a plan out through a driver, records every action
//     in a chaos.FaultLog, keeps track of what is down so that it can heal
//     and restart everything before it returns, and tells the checkers
//     which servers are unavailable and which were restarted.
//
// It changes nothing but what the driver's actions change, and only on the
// servers it was given. Like chaos, it must be imported only by tests, the
// simulator and the meteor command.
package hosts
