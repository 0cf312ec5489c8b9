// Package sim is Meteor's fleet simulator: it runs many simulated devices
// in one process against a real cluster, to measure how a change spreads
// over a fleet on realistic links.
//
// Every simulated device is a real agent.Agent (real QUIC sessions, TLS
// handshakes with its own device certificate, framing, an fsynced journal
// in its own data directory) whose only driver is "sim", acting on a
// per-device driver.SimDevice seeded from the fleet seed. Its UDP socket
// is wrapped in a chaos.PacketConn carrying the device's link profile,
// with one peer profile per server so that each device has a near server
// (its own region's) and far ones. Devices of the "popup" link go offline
// for long periods (chaos.PacketConn.Blackhole) and lose power: the agent
// is stopped abruptly and started again from its data directory.
//
// It owns:
//
//   - plan.go: the link profiles (fiber, cellular, popup) and fleet mixes
//     (one profile for every device, or the "retail" mix), turned into a
//     deterministic list of device plans by the seed;
//   - fleet.go: [Fleet], which issues the certificates, starts the agents
//     in ramps, drives outages and power losses, and samples the agents'
//     own Status;
//   - report.go: the live one-line summary and the final JSON [Report]
//     (time to 50/90/99/100 % converged per link profile, bytes per
//     device).
//
// Goroutines: Fleet.Run owns them all and returns only after they exited:
// one per device (its agent, restarted after power losses, and for popup
// devices its offline schedule), one sampler and one summary printer.
// The sampler is the only writer of the devices' convergence times; the
// device goroutine the only writer of its agent and socket fields; both
// are guarded by the device's mutex for Report and Summary.
//
// What it must not do: touch the host. Devices get only the sim driver,
// and Root confines paths under the fleet's base directory anyway. It
// talks to the cluster only through the agents' wire protocol; comparing
// with the servers' view is the caller's business (cluster/api). It may
// import chaos (chaos.TestNothingImportsChaos allows a package named sim).
package sim
