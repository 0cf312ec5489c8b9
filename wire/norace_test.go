//go:build !race

package wire

// raceBuild: see race_test.go.
const raceBuild = false
