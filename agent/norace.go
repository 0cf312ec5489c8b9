//go:build !race

package agent

// raceBuild: see race.go.
const raceBuild = false
